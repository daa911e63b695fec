#pragma once
// warm_up: creates up front what the first operations on a GPU would otherwise create lazily, so that a timed loop
// (Trainer::fit) does not pay for it in its first step.

#include <vector>

#include "tandem/core/device.h"

namespace tandem {

// For every CUDA device of `devices`: its compute and communication streams, its cuBLAS and cuBLASLt handles and the
// cuBLASLt workspace; and peer access between every two of the CUDA devices listed. CPU devices need nothing. Safe to
// call again and from several threads (what exists is kept). comm::warm_up adds the NCCL communicators.
// Errors: a device that does not exist.
void warm_up(const std::vector<Device>& devices);

}  // namespace tandem
