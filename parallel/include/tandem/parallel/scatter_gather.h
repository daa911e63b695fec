#pragma once
// Differentiable scatter and gather (torch.nn.parallel.scatter_gather): comm::scatter / comm::gather whose
// gradients flow back (see docs/comm.md, "parallel").

#include <cstdint>
#include <vector>

#include "tandem/core/device.h"
#include "tandem/core/tensor.h"

namespace tandem::parallel {

// As comm::scatter (same rules and errors; chunk i on devices[i], possibly fewer chunks than devices). The gradient
// of the input is the gather of the chunk gradients onto the input's device; chunks without one count as zeros.
std::vector<Tensor> scatter(const Tensor& input, const std::vector<Device>& devices,
                            const std::vector<int64_t>& chunk_sizes = {}, int64_t dim = 0);

// As comm::gather onto `destination` (same rules and errors). The gradient of each input is its slice of the
// output gradient, on the input's device.
Tensor gather(const std::vector<Tensor>& outputs, Device destination, int64_t dim = 0);

}  // namespace tandem::parallel
