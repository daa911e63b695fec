#pragma once
// The host launchers of the CUDA kernels that draw in place (uniform_fill.cu): the uniform fill behind Tensor::rand
// and Tensor::uniform on a GPU (Note [Random draws in captured graphs] in tandem/core/random.h), and dropout with its
// mask drawn where it is applied (Backend::apply_dropout).

#include <cuda_runtime.h>

#include <cstdint>

#include "draw_place.h"

namespace tandem::cuda::kernels {

// out[i] = uniform_value(value i of `place`, low, high) for i < n (uniform_value.h); returns at once for n 0.
void fill_uniform(float* out, int64_t n, detail::DrawPlace place, float low, float high, cudaStream_t stream);
// out[i] = x[i] * mask.factor(i) for i < n (out may be x); returns at once for n 0.
void apply_dropout(const float* x, float* out, int64_t n, detail::DropoutMask mask, cudaStream_t stream);

}  // namespace tandem::cuda::kernels
