#pragma once
// The one rule that turns a value of a generator stream into a float of U[low, high): random::uniform on the host
// (random.cpp) and the CUDA fill (cuda/uniform_fill.cu) both call it, so a tensor drawn on a GPU holds bitwise the
// values drawn on the host (Note [Random draws in captured graphs] in tandem/core/random.h).

#include <cmath>
#include <cstdint>

#include "tandem/core/host_device.h"

namespace tandem::detail {

// Uniform in [0, 1) with the top 24 bits of `bits`: exactly representable in float32.
TANDEM_HOST_DEVICE inline double unit_from_bits(uint64_t bits) { return static_cast<double>(bits >> 40) * 0x1.0p-24; }

// low + (high - low) * unit in float64, rounded to float32; a value that rounds up to `high` becomes the float just
// below it. Each float64 operation is rounded on its own on both sides (Note [Rounding like the CPU] in
// kernel_ops.h: nvcc would otherwise contract the product and the sum into one fused multiply-add).
TANDEM_HOST_DEVICE inline float uniform_value(uint64_t bits, float low, float high) {
  const double span = static_cast<double>(high) - static_cast<double>(low);
#if defined(__CUDA_ARCH__)
  const float value = __double2float_rn(__dadd_rn(static_cast<double>(low), __dmul_rn(span, unit_from_bits(bits))));
  return value < high ? value : nextafterf(high, low);
#else
  const float value = static_cast<float>(low + span * unit_from_bits(bits));
  return value < high ? value : std::nextafter(high, low);
#endif
}

}  // namespace tandem::detail
