#pragma once
// Element conversions between the dtypes' C++ types, the one rule behind Tensor::to(DType) and copy_ between dtypes
// on every device (cpu/convert.cpp, cuda/convert.cu). Usable in host code and in CUDA kernels, but for
// with_element_type, which picks the types on the host.
//
// Note [Conversions]: as PyTorch converts elements,
//   - float32 / bfloat16 -> int64 truncates toward zero. PyTorch leaves NaN and values outside int64's range
//     undefined (x86 and CUDA disagree); tandem gives 0 for NaN and saturates at INT64_MIN / INT64_MAX, the same on
//     every device;
//   - int64 -> float32 rounds to the nearest float (ties to even);
//   - float32 -> bfloat16 rounds to nearest even (Note [bfloat16 rounding]); int64 -> bfloat16 goes through float32,
//     rounding twice, as c10::BFloat16's constructor from an integer does;
//   - bfloat16 -> float32 is exact.

#include <cstdint>
#include <cstring>
#include <type_traits>

#include "tandem/core/bfloat16.h"
#include "tandem/core/dtype.h"
#include "tandem/core/error.h"

namespace tandem::detail {

TANDEM_HOST_DEVICE inline int64_t float_to_int64(float value) {
  constexpr float kTwoTo63 = 9223372036854775808.0f;
  if (value != value) return 0;
  if (value >= kTwoTo63) return INT64_MAX;
  if (value < -kTwoTo63) return INT64_MIN;
  return static_cast<int64_t>(value);  // in range: truncates toward zero
}

template <class To, class From>
TANDEM_HOST_DEVICE To convert_element(From value) {
  if constexpr (std::is_same_v<To, From>) {
    return value;
  } else if constexpr (std::is_same_v<To, int64_t>) {
    return float_to_int64(static_cast<float>(value));  // from float32 or bfloat16 (exact to float)
  } else if constexpr (std::is_same_v<To, float>) {
    return static_cast<float>(value);
  } else {
    return BFloat16(static_cast<float>(value));
  }
}

// The element of type T whose bit pattern is the low sizeof(T) bytes of `bits` (Backend::fill_bits).
template <class T>
TANDEM_HOST_DEVICE T element_from_bits(uint64_t bits) {
  if constexpr (std::is_same_v<T, BFloat16>) {
    return BFloat16::from_bits(static_cast<uint16_t>(bits));
  } else {
    using Bits = std::conditional_t<sizeof(T) == 4, uint32_t, uint64_t>;
    static_assert(sizeof(Bits) == sizeof(T), "element_from_bits: float32 and int64 are 4 and 8 bytes");
    const Bits narrow = static_cast<Bits>(bits);
    T value;
    std::memcpy(&value, &narrow, sizeof(T));
    return value;
  }
}

// Calls fn(T{}) with T the C++ element type of `dtype`; `caller` names the function for a dtype it does not know.
template <typename Fn>
void with_element_type(DType dtype, const char* caller, Fn&& fn) {
  switch (dtype) {
    case DType::Float32:
      return fn(float{});
    case DType::Int64:
      return fn(int64_t{});
    case DType::BFloat16:
      return fn(BFloat16{});
  }
  TANDEM_INTERNAL_ASSERT(false, caller, ": unknown dtype ", static_cast<int>(dtype));
}

}  // namespace tandem::detail
