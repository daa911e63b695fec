#include "fan_in_uniform.h"

#include <cmath>

namespace tandem::nn::detail {

Tensor fan_in_uniform(const Shape& shape, int64_t fan_in, Device device) {
  const float bound = 1.0f / std::sqrt(static_cast<float>(fan_in));
  return Tensor::uniform(shape, -bound, bound, device);
}

}  // namespace tandem::nn::detail
