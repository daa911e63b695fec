#pragma once
// Host launchers of the CUDA backend's elementwise kernels (elementwise.cu): every pointwise functor of kernel_ops.h,
// fills, copies and the few elementwise functions that read a scalar in device memory, all through one elementwise
// engine; and gather / scatter-add along a dimension. They take raw device pointers and the stream to launch on; the
// caller has already checked shapes and devices and set the current device. Each launcher returns at once on empty
// work and checks its launches (throws tandem::Error).

#include <cuda_runtime.h>

#include <cstdint>

#include "backend.h"
#include "cuda/strided_layout.h"

namespace tandem::cuda::kernels {

// Over a Strided layout: operand 0 = out / dst, operands 1.. = the inputs / src.
// out = f(inputs[0..arity)) with f = call's functor (Backend::pointwise's contract).
void pointwise(const backend::PointwiseCall& call, const float* const* inputs, float* out, const Strided& layout,
               cudaStream_t stream);
void fill(float* out, const Strided& layout, float value, cudaStream_t stream);
void copy(const float* src, float* dst, const Strided& layout, cudaStream_t stream);
// out (contiguous [rows, cols]) = Backend::triangle_mask's 0/1 mask.
void triangle_mask(int64_t rows, int64_t cols, int64_t diagonal, bool lower, float* out, cudaStream_t stream);

// out = the row-major copy of the [rows, cols] matrix that `in` holds at (r, c) -> r + c * in_col_stride (a
// transposed view), through shared-memory tiles (Note [Transposing copies] in elementwise.cu); copy() takes it for
// such layouts. With tile_row_sums not null, also each row's sum over each tile of kTransposeTile columns:
// tile_row_sums[t * rows + r] = the sum of in(r, c) over the tile's c, for t < transpose_tiles(cols), in a fixed
// order; sum_dim over t then gives the row sums.
constexpr int kTransposeTile = 32;
inline int64_t transpose_tiles(int64_t n) { return (n + kTransposeTile - 1) / kTransposeTile; }  // along n
void transpose(const float* in, int64_t rows, int64_t cols, int64_t in_col_stride, float* out, float* tile_row_sums,
               cudaStream_t stream);

// Contiguous, n elements, with a scalar in device memory (no host round trip).
// out[i] = scale * *scalar (the backward of sum and mean).
void broadcast_scalar(const float* scalar, float scale, float* out, int64_t n, cudaStream_t stream);
// grad_input[i] = *grad * 2 / n * (input[i] - target[i]).
void mse_backward(const float* grad, const float* input, const float* target, float* grad_input, int64_t n,
                  cudaStream_t stream);
// x[i] *= min(max_norm / (*norm + 1e-6), 1) (clip_grad_norm_'s scaling).
void clip_by_norm(float* x, int64_t n, const float* norm, float max_norm, cudaStream_t stream);

// Over `layout` = collapse_dims(index shape, {out or src strides, index strides, x or target strides with stride 0 at
// dim}): gather reads x[base + index * dim_stride] into out; scatter_add adds src into target there (atomically).
// The int64 indices were checked against [0, dim_size) by the caller, on the host or, under a capture, by a kernel
// before these (Note [Index checks on the device] in backend.h): an index outside it gathers NaN and scatters nothing.
void gather(const float* x, int64_t dim_size, int64_t dim_stride, const int64_t* index, float* out,
            const Strided& layout, cudaStream_t stream);
void scatter_add(const float* src, int64_t dim_size, int64_t dim_stride, const int64_t* index, float* target,
                 const Strided& layout, cudaStream_t stream);

}  // namespace tandem::cuda::kernels
