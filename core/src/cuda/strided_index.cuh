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

// The element offsets of the operands 0..kOperands-1 at flat row-major index i of s's sizes.
template <int kOperands>
__device__ inline void strided_offsets(int64_t i, const Strided& s, int64_t (&offset)[kMaxOperands]) {
#pragma unroll
  for (int k = 0; k < kMaxOperands; ++k) offset[k] = 0;
  int64_t rest = i;
#pragma unroll
  for (int d = kMaxDims - 1; d >= 0; --d) {
    if (d < s.ndim) {
      const int64_t coordinate = rest % s.sizes[d];
      rest /= s.sizes[d];
#pragma unroll
      for (int k = 0; k < kOperands; ++k) offset[k] += coordinate * s.strides[k][d];
    }
  }
}

}  // namespace tandem::cuda::kernels
