#pragma once
// How tandem-train names the devices of its run, for its banners and summaries.

#include <string>
#include <vector>

#include "tandem/comm/process_group.h"

namespace tandem::train_tool {

// "[cuda:0, cuda:1]" for one process; "2 processes x [cpu:0]" (this process's devices) for a group.
std::string describe_devices(const comm::ProcessGroup& group);

// Every process's device list, by rank, gathered through the group (collective: every process calls it).
std::vector<std::vector<std::string>> rank_devices(comm::ProcessGroup& group);

}  // namespace tandem::train_tool
