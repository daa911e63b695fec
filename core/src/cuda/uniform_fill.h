#pragma once
// The host launcher of the CUDA uniform fill (uniform_fill.cu), the kernel behind Tensor::rand and Tensor::uniform on
// a GPU (Note [Random draws in captured graphs] in tandem/core/random.h).

#include <cuda_runtime.h>

#include <cstdint>

namespace tandem::cuda::kernels {

// Where a fill's values lie in their generator stream. Eager: element i is value first + i of the stream whose key
// is `key`. Captured (words set): the key is words[0] and element i is value words[1] + first + i, read from device
// memory when the kernel runs, so that each replay of a graph reads the position the host wrote before it.
struct StreamPlace {
  const uint64_t* words = nullptr;
  uint64_t key = 0;
  uint64_t first = 0;
};

// out[i] = uniform_value(splitmix64(key, first + i), low, high) for i < n (uniform_value.h); returns at once for n 0.
void fill_uniform(float* out, int64_t n, StreamPlace place, float low, float high, cudaStream_t stream);

}  // namespace tandem::cuda::kernels
