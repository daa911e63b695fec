// The CUDA kernels that draw in place (uniform_fill.h): one thread per element (four for dropout) in a grid-stride
// loop, each value a pure function of its stream position.

#include "cuda/launch.cuh"
#include "cuda/uniform_fill.h"
#include "tandem/core/splitmix64.h"
#include "uniform_value.h"

namespace tandem::cuda::kernels {
namespace {

__device__ void uniform_kernel(float* out, int64_t n, detail::DrawPlace place, float low, float high) {
  const detail::DrawPlace values = place.resolved();
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    out[i] = detail::uniform_value(values.bits(static_cast<uint64_t>(i)), low, high);
  }
}

// Four elements per step, read and written as float4 where x and out are 16-byte aligned; the tail one by one.
__device__ void dropout_kernel(const float* x, float* out, int64_t n, detail::DropoutMask mask) {
  const detail::DropoutMask drawn = mask.resolved();
  const bool vector = (reinterpret_cast<uintptr_t>(x) | reinterpret_cast<uintptr_t>(out)) % 16 == 0;
  const int64_t quads = vector ? n / 4 : 0;
  for (int64_t q = global_thread(); q < quads; q += grid_threads()) {
    float4 v = reinterpret_cast<const float4*>(x)[q];
    const auto i = static_cast<uint64_t>(4 * q);
    v.x *= drawn.factor(i);
    v.y *= drawn.factor(i + 1);
    v.z *= drawn.factor(i + 2);
    v.w *= drawn.factor(i + 3);
    reinterpret_cast<float4*>(out)[q] = v;
  }
  for (int64_t i = 4 * quads + global_thread(); i < n; i += grid_threads()) {
    out[i] = x[i] * drawn.factor(static_cast<uint64_t>(i));
  }
}

}  // namespace

void apply_dropout(const float* x, float* out, int64_t n, detail::DropoutMask mask, cudaStream_t stream) {
  if (n == 0) return;
  launch<dropout_kernel>(blocks_for((n + 3) / 4), kThreads, stream, x, out, n, mask);
}

void fill_uniform(float* out, int64_t n, detail::DrawPlace place, float low, float high, cudaStream_t stream) {
  if (n == 0) return;
  launch<uniform_kernel>(blocks_for(n), kThreads, stream, out, n, place, low, high);
}

}  // namespace tandem::cuda::kernels
