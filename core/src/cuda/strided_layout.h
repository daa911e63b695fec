#pragma once
// The iteration space of an elementwise CUDA kernel (kernels::Strided), and how it is built from tensor sizes and
// strides.

#include <cstdint>
#include <initializer_list>
#include <vector>

#include "tandem/core/shape.h"

namespace tandem::cuda {

namespace kernels {

constexpr int kMaxDims = 8;
constexpr int kMaxOperands = 4;  // the output and up to three inputs

// The iteration space of an elementwise kernel: up to kMaxDims sizes (row-major order) and, per operand, element
// strides (0 = broadcast). Operand 0 is the output. Built by collapse_dims, which drops size-1 dims and merges
// contiguous ones, so a contiguous tensor always arrives as one dim of stride 1.
struct Strided {
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxOperands][kMaxDims] = {};
};

}  // namespace kernels

// The layout of an elementwise op over `sizes` with one stride vector per operand (operand 0 is the output, at
// most kernels::kMaxOperands): size-1 dims are dropped and neighbouring dims that are contiguous in every operand
// merged, so that contiguous operands become one dim of stride 1 and a bias broadcast over rows becomes
// [rows, cols] with strides {0, 1}. Throws Error when more than kernels::kMaxDims dims remain.
kernels::Strided collapse_dims(const Shape& sizes, const std::vector<const Shape*>& strides);
inline kernels::Strided collapse_dims(const Shape& sizes, std::initializer_list<const Shape*> strides) {
  return collapse_dims(sizes, std::vector<const Shape*>(strides));
}

}  // namespace tandem::cuda
