#pragma once
// Indexing of a kernels::Strided iteration space, shared by the elementwise, gather and scatter-add kernels
// (elementwise.cu) and the conversion kernels (convert.cu).

#include <cstdint>

#include "cuda/strided_layout.h"

namespace tandem::cuda::kernels {

// The number of elements in s's iteration space.
inline int64_t elements_of(const Strided& s) {
  int64_t n = 1;
  for (int d = 0; d < s.ndim; ++d) n *= s.sizes[d];
  return n;
}

// Whether s is one dimension in which the first `operands` operands all have stride 1.
inline bool all_contiguous(const Strided& s, int operands) {
  if (s.ndim != 1) return false;
  for (int k = 0; k < operands; ++k)
    if (s.strides[k][0] != 1) return false;
  return true;
}

// Whether the first `operands` operands of s have stride 1 in its last dim, which holds a multiple of 4 elements, and
// strides that are multiples of 4 in the others: then the 4 elements from any flat index that is a multiple of 4 are
// 4 consecutive elements of each operand, one vector access where the operand's start is aligned to it.
inline bool packs_of_4(const Strided& s, int operands) {
  if (s.ndim < 1 || s.sizes[s.ndim - 1] % 4 != 0) return false;
  for (int k = 0; k < operands; ++k) {
    for (int d = 0; d < s.ndim; ++d) {
      if (d == s.ndim - 1 ? s.strides[k][d] != 1 : s.strides[k][d] % 4 != 0) return false;
    }
  }
  return true;
}

// Whether every flat index of s and every element offset of its first `operands` operands fits in 32 bits, so that
// strided_offsets may compute in uint32_t (a 64-bit division costs several times a 32-bit one, and a strided kernel
// divides once per dim and element).
inline bool fits_32_bits(const Strided& s, int operands) {
  constexpr int64_t kLimit = 0xffffffffLL;
  if (elements_of(s) > kLimit) return false;
  for (int k = 0; k < operands; ++k) {
    int64_t last = 0;
    for (int d = 0; d < s.ndim; ++d) last += (s.sizes[d] - 1) * s.strides[k][d];
    if (last > kLimit) return false;
  }
  return true;
}

// The element offsets of the operands 0..kOperands-1 at flat row-major index i of s's sizes, computed in Index
// (uint32_t only where fits_32_bits(s, kOperands)).
template <int kOperands, typename Index = int64_t>
__device__ inline void strided_offsets(int64_t i, const Strided& s, int64_t (&offset)[kMaxOperands]) {
  Index at[kMaxOperands] = {};
  auto rest = static_cast<Index>(i);
#pragma unroll
  for (int d = kMaxDims - 1; d >= 0; --d) {
    if (d < s.ndim) {
      const auto size = static_cast<Index>(s.sizes[d]);
      const Index coordinate = rest % size;
      rest /= size;
#pragma unroll
      for (int k = 0; k < kOperands; ++k) at[k] += coordinate * static_cast<Index>(s.strides[k][d]);
    }
  }
#pragma unroll
  for (int k = 0; k < kMaxOperands; ++k) offset[k] = k < kOperands ? static_cast<int64_t>(at[k]) : 0;
}

}  // namespace tandem::cuda::kernels
