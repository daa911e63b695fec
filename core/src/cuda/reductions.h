#pragma once
// Host launchers of the CUDA backend's reductions (reductions.cu). They take raw device pointers, element counts and
// the stream to launch on; the caller has already checked shapes and devices and set the current device. Each
// launcher returns at once on empty work where its contract allows and checks its launches (throws tandem::Error).

#include <cuda_runtime.h>

#include <cstdint>

#include "backend.h"

namespace tandem::cuda::kernels {

// x is contiguous [outer, reduce, inner]; out is contiguous [outer, inner].
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

// Backend::reduce_dim: x contiguous [outer, reduce, inner], reduce >= 1; values and (may be null) indices contiguous
// [outer, inner].
void reduce_dim(backend::ReduceOp op, const float* x, int64_t outer, int64_t reduce, int64_t inner, float* values,
                int64_t* indices, cudaStream_t stream);

}  // namespace tandem::cuda::kernels
