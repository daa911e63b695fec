#pragma once
// Host launchers of the CUDA backend's convolution and pooling kernels (image_kernels.cu): direct kernels over the
// windows of Note [Sliding windows] (sliding_windows.h), one thread per element written (an entry of cols, a pooled
// value, an input gradient), in grid-stride loops. The backward kernels gather: each thread sums what the outputs
// reading its input element send it, in a fixed order, so there are no atomics and every run gives the same values.
// The caller has checked the call and set the device; every launch is on `stream`, with no host synchronization and
// no memory but the caller's: capturable in a CUDA graph.

#include <cuda_runtime.h>

#include <cstdint>

#include "sliding_windows.h"

namespace tandem::cuda::kernels {

// Backend::im2col / col2im over contiguous float32 tensors.
void im2col(const float* input, const backend::Conv2dWindows& windows, float* cols, cudaStream_t stream);
void col2im(const float* cols, const backend::Conv2dWindows& windows, float* grad_input, cudaStream_t stream);
// Backend::max_pool2d, avg_pool2d and their backward passes over contiguous tensors (indices int64).
void max_pool2d(const float* input, const backend::Pool2dWindows& windows, float* out, int64_t* indices,
                cudaStream_t stream);
void max_pool2d_backward(const float* grad_out, const int64_t* indices, const backend::Pool2dWindows& windows,
                         float* grad_input, cudaStream_t stream);
void avg_pool2d(const float* input, const backend::Pool2dWindows& windows, float* out, cudaStream_t stream);
void avg_pool2d_backward(const float* grad_out, const backend::Pool2dWindows& windows, float* grad_input,
                         cudaStream_t stream);

}  // namespace tandem::cuda::kernels
