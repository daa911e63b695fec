#pragma once
// Builds the iteration space of an elementwise CUDA kernel from tensor sizes and strides.

#include <initializer_list>
#include <vector>

#include "cuda/kernels.h"
#include "tandem/core/shape.h"

namespace tandem::cuda {

// The layout of an elementwise op over `sizes` with one stride vector per operand (operand 0 is the output, at
// most kernels::kMaxOperands): size-1 dims are dropped and neighbouring dims that are contiguous in every operand
// merged, so that contiguous operands become one dim of stride 1 and a bias broadcast over rows becomes
// [rows, cols] with strides {0, 1}. Throws Error when more than kernels::kMaxDims dims remain.
kernels::Strided collapse_dims(const Shape& sizes, const std::vector<const Shape*>& strides);
inline kernels::Strided collapse_dims(const Shape& sizes, std::initializer_list<const Shape*> strides) {
  return collapse_dims(sizes, std::vector<const Shape*>(strides));
}

}  // namespace tandem::cuda
