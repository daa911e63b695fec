// Dimension collapsing for the elementwise CUDA kernels (see strided_layout.h).

#include "cuda/strided_layout.h"

#include "tandem/core/error.h"

namespace tandem::cuda {

kernels::Strided collapse_dims(const Shape& sizes, const std::vector<const Shape*>& strides) {
  const int operands = static_cast<int>(strides.size());
  TANDEM_INTERNAL_ASSERT(operands >= 1 && operands <= kernels::kMaxOperands, "cuda::collapse_dims: ", operands,
                         " operands but expected 1 to ", kernels::kMaxOperands);
  for (const Shape* operand : strides)
    TANDEM_INTERNAL_ASSERT(operand->size() == sizes.size(), "cuda::collapse_dims: strides ", to_string(*operand),
                           " do not match sizes ", to_string(sizes));

  kernels::Strided layout;
  int merged = 0;  // dims written to layout so far; layout.sizes[merged - 1] is the innermost one
  for (size_t d = 0; d < sizes.size(); ++d) {
    if (sizes[d] == 1) continue;
    bool mergeable = merged > 0;
    for (int k = 0; k < operands && mergeable; ++k)
      mergeable = layout.strides[k][merged - 1] == (*strides[k])[d] * sizes[d];
    if (mergeable) {
      layout.sizes[merged - 1] *= sizes[d];
      for (int k = 0; k < operands; ++k) layout.strides[k][merged - 1] = (*strides[k])[d];
      continue;
    }
    TANDEM_CHECK(merged < kernels::kMaxDims, "cuda backend: an elementwise op over sizes ", to_string(sizes),
                 " has more than ", kernels::kMaxDims, " dimensions that cannot be merged");
    layout.sizes[merged] = sizes[d];
    for (int k = 0; k < operands; ++k) layout.strides[k][merged] = (*strides[k])[d];
    ++merged;
  }
  if (merged == 0) {  // one element
    layout.sizes[0] = 1;
    for (int k = 0; k < operands; ++k) layout.strides[k][0] = 1;
    merged = 1;
  }
  layout.ndim = merged;
  return layout;
}

}  // namespace tandem::cuda
