#pragma once
// BFloat16: the upper 16 bits of an IEEE float32 (1 sign bit, 8 exponent bits, 7 mantissa bits), the storage type of
// DType::BFloat16. A plain value type usable in host code and in CUDA kernels, converting as PyTorch's bfloat16:
//   - float -> BFloat16 rounds to the nearest representable value, ties to even (a tie keeps the candidate whose
//     last mantissa bit is 0); values beyond the largest finite bfloat16 become infinities, subnormals round like
//     any other value, and every NaN becomes the quiet NaN 0x7FC0 (its payload is not kept);
//   - BFloat16 -> float is exact (the 16 bits are shifted back into the upper half of a float32).

#include <cstdint>
#include <cstring>

#include "tandem/core/host_device.h"

namespace tandem {

class BFloat16 {
 public:
  BFloat16() = default;  // +0
  TANDEM_HOST_DEVICE explicit BFloat16(float value) : bits_(round_to_nearest_even(value)) {}

  TANDEM_HOST_DEVICE static constexpr BFloat16 from_bits(uint16_t bits) { return BFloat16(bits, FromBits{}); }
  TANDEM_HOST_DEVICE constexpr uint16_t bits() const { return bits_; }

  TANDEM_HOST_DEVICE operator float() const {  // exact
    const uint32_t wide = static_cast<uint32_t>(bits_) << 16;
    float value;
    std::memcpy(&value, &wide, sizeof(value));
    return value;
  }

 private:
  struct FromBits {};
  TANDEM_HOST_DEVICE constexpr BFloat16(uint16_t bits, FromBits) : bits_(bits) {}

  // Note [bfloat16 rounding]: adding 0x7FFF to the float32 bits, plus 1 when the bit that becomes the last kept
  // mantissa bit is set, carries into the upper half exactly when the dropped lower half is above one half ulp, or
  // exactly one half and the kept part is odd: round to nearest, ties to even. A carry out of the mantissa bumps the
  // exponent, which is right (up to the next binade, or to infinity past the largest finite value). NaN is tested
  // first: a NaN whose payload sits only in the dropped bits would otherwise truncate to infinity.
  TANDEM_HOST_DEVICE static uint16_t round_to_nearest_even(float value) {
    uint32_t bits;
    std::memcpy(&bits, &value, sizeof(bits));
    if ((bits & 0x7FFFFFFFu) > 0x7F800000u) return 0x7FC0;  // NaN
    const uint32_t lsb = (bits >> 16) & 1u;
    return static_cast<uint16_t>((bits + 0x7FFFu + lsb) >> 16);
  }

  uint16_t bits_ = 0;
};

static_assert(sizeof(BFloat16) == 2, "BFloat16 must be two bytes: it is the storage of DType::BFloat16");

}  // namespace tandem
