#pragma once
// Host launchers of the CUDA backend's own matrix-product kernels (small_products.cu): products with a tiny output
// over a long k, products over a short k, and the two side by side. They take raw device pointers and the stream to
// launch on; which products take them is gemm.cpp's rule. Each launcher checks its operands and its launch (throws
// tandem::Error).

#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::cuda::kernels {

// The operands of a small product that one of the two kernels below computes whole, epilogue included: out[i][j]
// (= or +=) sum_p a[i][p] * b[p][j], in float32. a[i][p] is a[i * a_row_stride + p * a_col_stride] (any strides: a
// transposed view too), likewise b[p][j]; float32, or bfloat16 with `bfloat16` (widened exactly). Which products
// take which kernel is gemm.cpp's rule.
struct SmallProduct {
  int64_t m = 0, n = 0, k = 0;  // all > 0
  const void* a = nullptr;
  int64_t a_row_stride = 0, a_col_stride = 0;
  const void* b = nullptr;
  int64_t b_row_stride = 0, b_col_stride = 0;
  bool bfloat16 = false;
  float* out = nullptr;         // contiguous [m, n]
  bool accumulate = false;      // out += instead of out =
  float* a_row_sums = nullptr;  // tiny_product only: null, or contiguous [m]: = sum over p of a[i][p]
  const float* bias = nullptr;  // short_product only: null, or contiguous [n], added to every row (not with accumulate)
  bool relu = false;            // short_product only: out = max(product + bias, 0), NaN kept (not with accumulate)
};

// Note [Tiny products]: a product with a tiny output and a long k (a small layer's weight gradient g^T x over a batch:
// [20, 10] or [1, 20] over k = 4096) is all reduction and almost no output. cuBLAS and cuBLASLt split k over blocks and
// add the parts in further kernels (split-K plus a reduction kernel, plus one more for the bias gradient), a few
// microseconds each in a captured step of a dozen serial kernels. tiny_product does it in one launch: one block of 256
// threads per output element and one per row sum of a; each thread sums a strided share of k in float32 and the block
// adds the shares in a fixed tree (Note [Deterministic reductions] in reductions.h), so equal inputs give bitwise equal
// results.
void tiny_product(const SmallProduct& product, cudaStream_t stream);

// Note [Short products]: the other end, a product over a short k (a small layer's forward x W^T + b over k = 10
// inputs, its input gradient over k = its outputs) is all output and almost no reduction: a few microseconds of
// a cuBLASLt kernel that tiles for long sums, and a launch that cannot overlap its neighbours (Note [Dependent
// launches] in launch.cuh). short_product gives each thread one element of out at a time: its k terms summed in
// order, with fused multiply-adds, then the bias, the accumulation or ReLU; equal inputs give bitwise equal results.
void short_product(const SmallProduct& product, cudaStream_t stream);

// Note [Paired small products]: a linear layer's backward takes two products of the same g: the input gradient g W
// (a short product: k = the layer's outputs) and the weight gradient g^T x (a tiny one: k = the batch). Neither reads
// what the other writes, yet on one stream the second waits for the first. short_and_tiny_product runs both in one
// launch: the tiny product's blocks first (they are the longer ones), then the short product's, each block running
// exactly what it would run in its own kernel, so every element is bitwise what short_product and tiny_product give.
// The step then waits for the longer of the two instead of their sum. Both have the same operand type (bfloat16).
void short_and_tiny_product(const SmallProduct& short_one, const SmallProduct& tiny_one, cudaStream_t stream);

}  // namespace tandem::cuda::kernels
