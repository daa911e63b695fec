#pragma once
// Walks the elements of N same-shaped operands with arbitrary strides (0 for broadcast dimensions) one innermost
// row at a time, so that elementwise CPU kernels are a tight loop over a row.

#include <array>
#include <cstdint>
#include <vector>

#include "tandem/core/shape.h"

namespace tandem::cpu {

template <size_t N>
using Offsets = std::array<int64_t, N>;

// Note [coalescing]: size-1 dimensions are dropped and a dimension is merged into the next inner one when every
// operand steps over it exactly as if the two were one dimension (stride[d] == stride[d + 1] * size[d + 1]).
// Contiguous operands therefore become one row of numel elements with step 1, and a [N, C] + [C] broadcast becomes
// N rows of C.
template <size_t N>
struct StridedLayout {
  std::vector<int64_t> sizes;        // outermost first
  std::vector<Offsets<N>> strides;   // per dimension, one stride per operand
};

template <size_t N>
StridedLayout<N> coalesce(const Shape& shape, const std::array<const Shape*, N>& strides) {
  StridedLayout<N> layout;
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] == 1) continue;
    Offsets<N> step;
    for (size_t j = 0; j < N; ++j) step[j] = (*strides[j])[d];
    if (!layout.sizes.empty()) {
      const Offsets<N>& outer = layout.strides.back();
      bool mergeable = true;
      for (size_t j = 0; j < N; ++j) mergeable = mergeable && outer[j] == step[j] * shape[d];
      if (mergeable) {
        layout.sizes.back() *= shape[d];
        layout.strides.back() = step;
        continue;
      }
    }
    layout.sizes.push_back(shape[d]);
    layout.strides.push_back(step);
  }
  return layout;
}

// Calls row(length, offsets, steps) once per innermost row: operand j's elements in that row are at
// offsets[j] + i * steps[j] for i in [0, length), in row-major order of `shape`. Nothing is called when `shape` has
// no elements; a scalar is one row of length 1.
template <size_t N, typename Row>
void for_each_row(const Shape& shape, const std::array<const Shape*, N>& strides, Row&& row) {
  if (numel_of(shape) == 0) return;
  const StridedLayout<N> layout = coalesce(shape, strides);
  Offsets<N> offsets{};
  if (layout.sizes.empty()) {
    row(int64_t{1}, offsets, Offsets<N>{});
    return;
  }
  const int64_t inner = static_cast<int64_t>(layout.sizes.size()) - 1;
  std::vector<int64_t> index(inner, 0);
  while (true) {
    row(layout.sizes[inner], offsets, layout.strides[inner]);
    int64_t d = inner - 1;
    for (; d >= 0; --d) {
      if (++index[d] < layout.sizes[d]) {
        for (size_t j = 0; j < N; ++j) offsets[j] += layout.strides[d][j];
        break;
      }
      for (size_t j = 0; j < N; ++j) offsets[j] -= layout.strides[d][j] * (layout.sizes[d] - 1);
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

}  // namespace tandem::cpu
