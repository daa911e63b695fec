#pragma once
// Matrix products through cuBLASLt: those with a fused epilogue (the forward product of a linear layer with its bias,
// and a ReLU that follows it, applied in the epilogue; its weight-gradient product with the bias gradient reduced in
// the epilogue) and small plain ones; in any precision (float32, TF32, or bfloat16 operands with float32
// accumulation and output).

#include "backend.h"
#include "tandem/core/tensor.h"

namespace tandem::cuda {

// Computes Backend::gemm(a, b, options, out) through cuBLASLt on the compute stream of `device`, which the caller
// has made current, and returns true; or returns false having done nothing, and the caller computes the product
// another way. It takes products that fuse something cuBLAS cannot, with fused_linear() on: a bias, a ReLU or row
// sums (optionally accumulated), with a 16-byte-aligned bias or row-sum vector (cuBLASLt's alignment preferences
// cover the matrices only); and small plain products (optionally accumulated), without the workspace cuBLAS would
// allocate and, where k is short, in one kernel (Note [One kernel for small products] in lt_matmul.cpp); always
// with m, n and k > 0, and only when cuBLASLt has an algorithm for the product (Note [cuBLASLt plans]).
bool lt_matmul(const Tensor& a, const Tensor& b, const backend::GemmOptions& options, const Tensor& out, int device);

// Creates `device`'s cuBLASLt handle and workspace (Note [cuBLASLt workspace]) now rather than at its first product.
void create_lt_state(int device);

}  // namespace tandem::cuda
