#pragma once
// NCCL communicators for one process driving several GPUs, created once per device set and cached.

#include <nccl.h>

#include <vector>

namespace tandem::comm::nccl {

// One communicator per entry of `devices` (distinct CUDA device indices in ascending order; rank r is devices[r]),
// created with ncclCommInitAll on first use and kept for the life of the process. Thread-safe; once a device set's
// communicators exist, looking them up takes no lock (Note [Lock-free communicator lookup] in immortal_cache.h). The
// reference stays valid forever.
const std::vector<ncclComm_t>& communicators(const std::vector<int>& devices);

}  // namespace tandem::comm::nccl
