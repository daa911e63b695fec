#pragma once
// Device-to-device copies that overlap one another: each runs on the communication stream of one of its ends,
// ordered against the compute streams of both ends by events.

#include <vector>

#include "tandem/core/tensor.h"

namespace tandem::comm::cuda_copies {

// dsts[i] = srcs[i] for contiguous tensors of equal size on CUDA devices (the two ends of a copy may be one
// device). Copy i runs on the communication stream of device carriers[i], which must be one of its two ends; copies
// on different streams overlap.
void copy_on_comm_streams(const std::vector<Tensor>& srcs, const std::vector<Tensor>& dsts,
                          const std::vector<int>& carriers);

}  // namespace tandem::comm::cuda_copies
