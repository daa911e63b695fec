#pragma once
// Reductions over the 32 lanes of a warp, shared by the reduction kernels of kernels.cu and elementwise.cu.

namespace tandem::cuda::kernels {

// v combined over the warp's lanes by `combine` (every lane must call it); the result is valid in lane 0. Lane l
// combines with lane l + 16, then l + 8, ..., l + 1: a fixed order, so the result is the same on every run.
template <typename Combine>
__device__ inline float warp_reduce(float v, Combine combine) {
  for (int offset = 16; offset > 0; offset /= 2) v = combine(v, __shfl_down_sync(0xffffffffu, v, offset));
  return v;
}

struct Add {
  __device__ float operator()(float a, float b) const { return a + b; }
};

__device__ inline float warp_sum(float v) { return warp_reduce(v, Add{}); }

}  // namespace tandem::cuda::kernels
