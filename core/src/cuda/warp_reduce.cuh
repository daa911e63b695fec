#pragma once
// Reductions over the 32 lanes of a warp and over the threads of a block, shared by the reduction kernels
// (reductions.cu) and the small products (small_products.cu).

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

// v combined over the block (blockDim.x a multiple of 32); the result is valid in thread 0. Every thread of the
// block must call it.
template <typename Combine>
__device__ inline float block_reduce(float v, Combine combine) {
  __shared__ float warp_results[32];
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x / 32;
  v = warp_reduce(v, combine);
  __syncthreads();  // a previous call may still be reading warp_results
  if (lane == 0) warp_results[warp] = v;
  __syncthreads();
  if (warp == 0) v = warp_reduce(lane < static_cast<int>(blockDim.x / 32) ? warp_results[lane] : 0.0f, combine);
  return v;
}

__device__ inline float block_sum(float v) { return block_reduce(v, Add{}); }

}  // namespace tandem::cuda::kernels
