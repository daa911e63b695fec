#pragma once
// tandem-train --task language-model: a GPT trained on a text file (docs/tandem-train.md).

#include <memory>

#include "flags.h"
#include "tandem/comm/process_group.h"

namespace tandem::train_tool {

// Trains as one process of `group`: prints the banner, each evaluation and the summary on rank 0, writes
// --summary-json, and generates --sample characters. Returns the exit status.
int train_language_model(const Flags& flags, const std::shared_ptr<comm::ProcessGroup>& group);

}  // namespace tandem::train_tool
