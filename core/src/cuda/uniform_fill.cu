// The CUDA uniform fill (uniform_fill.h): one thread per element in a grid-stride loop, each value a pure function of
// its stream position.

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

}  // namespace

void fill_uniform(float* out, int64_t n, detail::DrawPlace place, float low, float high, cudaStream_t stream) {
  if (n == 0) return;
  launch<uniform_kernel>(blocks_for(n), kThreads, stream, out, n, place, low, high);
}

}  // namespace tandem::cuda::kernels
