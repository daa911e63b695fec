#pragma once
// Host launchers of the CUDA backend's own kernels (kernels.cu). They take raw device pointers, element counts
// and the stream to launch on; the caller has already checked shapes and devices, set the current device and
// returns early on empty tensors where it must. Every launcher checks its launches (throws tandem::Error).

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "backend.h"

namespace tandem::cuda::kernels {

constexpr int kMaxDims = 8;
constexpr int kMaxOperands = 4;  // the output and up to three inputs

// The iteration space of an elementwise kernel: up to kMaxDims sizes (row-major order) and, per operand, element
// strides (0 = broadcast). Operand 0 is the output. Built by collapse_dims (strided_layout.h), which drops size-1
// dims and merges contiguous ones, so a contiguous tensor always arrives as one dim of stride 1.
struct Strided {
  int ndim = 0;
  int64_t sizes[kMaxDims] = {};
  int64_t strides[kMaxOperands][kMaxDims] = {};
};

// Elementwise, over a Strided layout: operand 0 = out / dst, operand 1 = src / a, operand 2 = b.
void fill(float* out, const Strided& layout, float value, cudaStream_t stream);
void copy(const float* src, float* dst, const Strided& layout, cudaStream_t stream);
void binary(backend::BinaryOp op, const float* a, const float* b, float* out, const Strided& layout,
            cudaStream_t stream);

// out = the row-major copy of the [rows, cols] matrix that `in` holds at (r, c) -> r + c * in_col_stride (a
// transposed view), through shared-memory tiles (Note [Transposing copies] in kernels.cu); copy() takes it for such
// layouts. With tile_row_sums not null, also each row's sum over each tile of kTransposeTile columns:
// tile_row_sums[t * rows + r] = the sum of in(r, c) over the tile's c, for t < transpose_tiles(cols), in a fixed
// order; sum_dim over t then gives the row sums.
constexpr int kTransposeTile = 32;
inline int64_t transpose_tiles(int64_t n) { return (n + kTransposeTile - 1) / kTransposeTile; }  // along n
void transpose(const float* in, int64_t rows, int64_t cols, int64_t in_col_stride, float* out, float* tile_row_sums,
               cudaStream_t stream);

// Elementwise, contiguous, n elements.
void axpy(float alpha, const float* x, float* y, int64_t n, cudaStream_t stream);
void scale(const float* x, float s, float* out, int64_t n, cudaStream_t stream);
void unary(backend::UnaryOp op, const float* x, float* out, int64_t n, cudaStream_t stream);
void unary_backward(backend::UnaryOp op, const float* grad, const float* saved, float* out, int64_t n,
                    cudaStream_t stream);
// out[i] = scale * *scalar, with scalar in device memory.
void broadcast_scalar(const float* scalar, float scale, float* out, int64_t n, cudaStream_t stream);
// grad_input[i] = *grad * 2 / n * (input[i] - target[i]), with grad in device memory.
void mse_backward(const float* grad, const float* input, const float* target, float* grad_input, int64_t n,
                  cudaStream_t stream);
// One step of torch.optim.SGD's rule (fused.h); momentum_buffer is read and written only when momentum != 0.
// lr_on_device: null, or the learning rate in device memory, read in place of update.lr when the kernel runs.
void sgd_update(float* param, const float* grad, float* momentum_buffer, int64_t n, const SgdUpdate& update,
                const float* lr_on_device, cudaStream_t stream);
// One step of torch.optim.Adam's / AdamW's rule (fused.h); max_exp_avg_sq is read and written only when
// update.amsgrad. step_factors: null, or param_scale, step_size and bias_correction2_sqrt in device memory, read in
// place of update's when the kernel runs.
void adam_update(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, float* max_exp_avg_sq, int64_t n,
                 const AdamUpdate& update, const float* step_factors, cudaStream_t stream);
// The multi-tensor forms (Note [Multi-tensor updates] in fused.h): each entry is one call of the launcher above,
// entries without elements are skipped, and the whole list takes one launch (a few for a very long list). Bitwise the
// results of one single-tensor launch per entry.
struct SgdEntry {
  float* param;
  const float* grad;
  float* momentum_buffer;  // read and written only when update.momentum != 0
  const float* lr;         // null: update.lr
  int64_t n;
  SgdUpdate update;
};
void sgd_update(const std::vector<SgdEntry>& entries, cudaStream_t stream);
struct AdamEntry {
  float* param;
  const float* grad;
  float* exp_avg;
  float* exp_avg_sq;
  float* max_exp_avg_sq;      // null unless update.amsgrad
  const float* step_factors;  // null: update's factors
  int64_t n;
  AdamUpdate update;
};
void adam_update(const std::vector<AdamEntry>& entries, cudaStream_t stream);
// x[i] *= min(max_norm / (*norm + 1e-6), 1), with norm in device memory (clip_grad_norm_'s scaling).
void clip_by_norm(float* x, int64_t n, const float* norm, float max_norm, cudaStream_t stream);

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

// Note [Tiny products]: a product with a tiny output and a long k (a small layer's weight gradient g^T x over a
// batch: [20, 10] or [1, 20] over k = 4096) is all reduction and almost no output. cuBLAS and cuBLASLt split k over
// blocks and add the parts in further kernels (split-K plus a reduction kernel, plus one more for the bias gradient),
// a few microseconds each in a captured step of a dozen serial kernels. tiny_product does it in one launch: one block
// of 256 threads per output element and one per row sum of a; each thread sums a strided share of k in float32 and
// the block adds the shares in a fixed tree (Note [Deterministic reductions]), so equal inputs give bitwise equal
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

// Reductions. x is contiguous [outer, reduce, inner]; out is contiguous [outer, inner].
void sum_dim(const float* x, float* out, int64_t outer, int64_t reduce, int64_t inner, cudaStream_t stream);

// Note [Deterministic reductions]: sum_all, mse_forward and vector_norm reduce in a fixed order, so that equal inputs
// give bitwise equal results on every run (no atomics). Up to 64K elements (a loss over a batch, say) one block of
// 1024 threads does it all in one launch: each thread combines a strided share, then the block combines the threads'
// results. Larger inputs take two passes: per-block partial results (sums, or maxima) into a scratch buffer, then one
// block over the partials. The caller provides the scratch: reduce_scratch_floats(n) floats on the device, or none
// when that is 0 (the single pass).
int64_t reduce_scratch_floats(int64_t n);
// *out = scale * sum(x[0..n))
void sum_all(const float* x, int64_t n, float scale, float* out, float* scratch, cudaStream_t stream);
// *out = mean((input - target)^2) over n elements (NaN when n == 0, like the mean of nothing)
void mse_forward(const float* input, const float* target, int64_t n, float* out, float* scratch,
                 cudaStream_t stream);
// *out = (sum |x|^ord)^(1/ord) over n elements, or max |x| when ord is +infinity (NaN when any element is NaN);
// 0 when n == 0. Scratch as for sum_all.
void vector_norm(const float* x, int64_t n, double ord, float* out, float* scratch, cudaStream_t stream);

}  // namespace tandem::cuda::kernels
