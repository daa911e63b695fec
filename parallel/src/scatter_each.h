#pragma once
// Scattering several inputs, and gathering several outputs, the same way over a list of devices: what DataParallel
// and the module form of ReplicatedModule do with a call's tensors.

#include <cstdint>
#include <vector>

#include "tandem/core/device.h"
#include "tandem/core/tensor.h"

namespace tandem::parallel::detail {

// Scatters every input along `dim` over `devices` the same way (parallel::scatter, differentiable); result [i][j] is
// chunk i of input j. Equal sizes along `dim` give every input the same chunks (torch.chunk rules), possibly fewer
// chunks than devices. Errors name `fn`: inputs of different sizes along `dim`; those of scatter.
std::vector<std::vector<Tensor>> scatter_each(const std::vector<Tensor>& inputs, const std::vector<Device>& devices,
                                              int64_t dim, const char* fn);

// Output k is the gather (parallel::gather, differentiable) along `dim` onto `destination` of every replica's output
// k. Errors name `fn`: replicas that returned different numbers of outputs; those of gather.
std::vector<Tensor> gather_each(const std::vector<std::vector<Tensor>>& replica_outputs, Device destination,
                                int64_t dim, const char* fn);

}  // namespace tandem::parallel::detail
