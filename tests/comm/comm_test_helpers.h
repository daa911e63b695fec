#pragma once
// Helpers shared by the comm tests: exact copies, float64 references for sums, known inputs.

#include <string>
#include <vector>

#include "support/test_support.h"

namespace tandem::testing {

// Values 0, 1, 2, ... (times `scale`, plus `offset`), row-major; small integers keep float sums exact.
inline Tensor iota(const Shape& shape, Device device, float scale = 1.0f, float offset = 0.0f) {
  std::vector<float> values(static_cast<size_t>(numel_of(shape)));
  for (size_t i = 0; i < values.size(); ++i) values[i] = offset + scale * static_cast<float>(i);
  return Tensor::from_vector(values, shape, device);
}

// Copies must be exact.
inline void expect_equal(const Tensor& actual, const Tensor& expected) { expect_close(actual, expected, 0.0, 0.0); }

// The elementwise sum of `tensors` (any devices) computed in float64 on the host.
inline std::vector<double> float64_sum(const std::vector<Tensor>& tensors) {
  std::vector<double> sum(static_cast<size_t>(tensors.at(0).numel()), 0.0);
  for (const Tensor& t : tensors) {
    const std::vector<double> values = to_double(t);
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += values[i];
  }
  return sum;
}

// A device that no machine here has.
inline Device missing_gpu() { return Device::cuda(7); }

}  // namespace tandem::testing
