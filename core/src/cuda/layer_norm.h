#pragma once
// Host launchers of the CUDA backend's layer normalization (Backend::layer_norm_forward / layer_norm_backward;
// layer_norm.cu) over raw device pointers; the caller has checked shapes and devices and set the current device.
//
// Note [Fused layer norm]: one warp normalizes one row. The forward reads the row three times (the sum, the squared
// deviations from the mean, the output), the second and third reads from the cache; the backward's row kernel reads
// x and grad_out twice (the two row sums, then grad_x). The weight and bias gradients are sums over the rows: a
// second kernel gives each thread one column of a chunk of rows, and the chunks' partial sums are added in chunk
// order (sum_dim), so the gradients are bitwise the same on every run (no atomics). Rows of a multiple of 4 columns
// with 16-byte aligned operands move as float4s.

#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::cuda::kernels {

struct LayerNormArgs {
  const float* x = nullptr;       // [rows, cols]
  const float* weight = nullptr;  // [cols] or null (1)
  const float* bias = nullptr;    // [cols] or null (0)
  int64_t rows = 0, cols = 0;
  float eps = 0.0f;
};

// out = the normalized rows; mean and rstd [rows].
void layer_norm_forward(const LayerNormArgs& a, float* out, float* mean, float* rstd, cudaStream_t stream);

// The floats of device scratch that layer_norm_backward needs for the weight and bias gradients of rows x cols.
int64_t layer_norm_scratch_floats(int64_t rows, int64_t cols);
// grad_x ([rows, cols]), grad_weight and grad_bias ([cols]) from grad_out ([rows, cols]) and the forward's mean and
// rstd; each output may be null (not computed). scratch: layer_norm_scratch_floats(rows, cols) floats, needed only
// for grad_weight or grad_bias.
void layer_norm_backward(const LayerNormArgs& a, const float* grad_out, const float* mean, const float* rstd,
                         float* grad_x, float* grad_weight, float* grad_bias, float* scratch, cudaStream_t stream);

}  // namespace tandem::cuda::kernels
