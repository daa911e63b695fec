#pragma once
// The default initialization of PyTorch's Linear and Conv2d layers, one rule for both.

#include <cstdint>

#include "tandem/core/tensor.h"

namespace tandem::nn::detail {

// U(-1/sqrt(fan_in), 1/sqrt(fan_in)) of `shape` on `device`, drawn with the global generator: the weight of
// torch.nn.Linear and Conv2d (kaiming_uniform with a = sqrt(5), whose bound is 1/sqrt(fan_in)) and their bias.
Tensor fan_in_uniform(const Shape& shape, int64_t fan_in, Device device);

}  // namespace tandem::nn::detail
