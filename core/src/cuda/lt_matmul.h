#pragma once
// Matrix products with a fused epilogue through cuBLASLt: the forward product of a linear layer with its bias (and
// a ReLU that follows it) applied in the epilogue, and its weight-gradient product with the bias gradient reduced in
// the epilogue; in any precision (float32, TF32, or bfloat16 operands with float32 accumulation and output).

#include "backend.h"
#include "tandem/core/tensor.h"

namespace tandem::cuda {

// Computes Backend::gemm(a, b, options, out) through cuBLASLt on the compute stream of `device`, which the caller
// has made current, and returns true; or returns false having done nothing, and the caller computes the product
// another way. It takes only products that fuse something cuBLAS cannot: with fused_linear() on, a bias, a ReLU or
// row sums (optionally accumulated), m, n and k > 0, and a 16-byte-aligned bias or row-sum vector (cuBLASLt's
// alignment preferences cover the matrices only); and only when cuBLASLt has an algorithm for it (Note [cuBLASLt
// plans]).
bool lt_matmul(const Tensor& a, const Tensor& b, const backend::GemmOptions& options, const Tensor& out, int device);

// Creates `device`'s cuBLASLt handle and workspace (Note [cuBLASLt workspace]) now rather than at its first product.
void create_lt_state(int device);

}  // namespace tandem::cuda
