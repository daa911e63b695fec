#pragma once
// The host launcher of the CUDA uniform fill (uniform_fill.cu), the kernel behind Tensor::rand and Tensor::uniform on
// a GPU (Note [Random draws in captured graphs] in tandem/core/random.h).

#include <cuda_runtime.h>

#include <cstdint>

#include "draw_place.h"

namespace tandem::cuda::kernels {

// out[i] = uniform_value(value i of `place`, low, high) for i < n (uniform_value.h); returns at once for n 0.
void fill_uniform(float* out, int64_t n, detail::DrawPlace place, float low, float high, cudaStream_t stream);

}  // namespace tandem::cuda::kernels
