// The attention backward's first pass: D = rowsum(dO * O) per query row (Note [Fused attention] in cuda/attention.h).
#include <cuda_bf16.h>

#include "cuda/attention.h"
#include "cuda/launch.cuh"
#include "cuda/warp_reduce.cuh"

namespace tandem::cuda::kernels {
namespace {

constexpr int kRowsPerBlock = kThreads / 32;

template <typename T>
__device__ float value_at(const void* data, int64_t i) {
  if constexpr (sizeof(T) == 2) {
    return __bfloat162float(static_cast<const __nv_bfloat16*>(data)[i]);
  } else {
    return static_cast<const float*>(data)[i];
  }
}

// One warp per row (n, i) of the N * L rows.
template <typename Grad, typename Out>
__device__ void row_dots(AttentionProblem p, AttentionOperand grad_out, const void* out, float* dots) {
  const int64_t row = static_cast<int64_t>(blockIdx.x) * kRowsPerBlock + threadIdx.x / 32;
  if (row >= p.batches * p.L) return;
  const int64_t n = row / p.L, i = row % p.L;
  const int64_t grad_start = grad_out.at(n, i), out_start = p.out.at(n, i);
  float sum = 0.0f;
  for (int e = threadIdx.x % 32; e < p.E; e += 32) {
    sum = fmaf(value_at<Grad>(grad_out.data, grad_start + e), value_at<Out>(out, out_start + e), sum);
  }
  sum = warp_sum(sum);
  if (threadIdx.x % 32 == 0) dots[row] = sum;
}

template <typename Grad>
void row_dots_for(const AttentionProblem& p, AttentionOperand grad_out, const void* out, bool out_bfloat16,
                  float* dots, cudaStream_t stream) {
  const int64_t rows = p.batches * p.L;
  const dim3 grid(static_cast<unsigned>((rows + kRowsPerBlock - 1) / kRowsPerBlock));
  if (out_bfloat16) {
    launch<row_dots<Grad, __nv_bfloat16>>(grid, dim3(kThreads), stream, p, grad_out, out, dots);
  } else {
    launch<row_dots<Grad, float>>(grid, dim3(kThreads), stream, p, grad_out, out, dots);
  }
}

}  // namespace

void attention_row_dots(const AttentionProblem& p, AttentionOperand grad_out, const void* out, bool out_bfloat16,
                        float* dots, cudaStream_t stream) {
  if (p.bfloat16) {
    row_dots_for<__nv_bfloat16>(p, grad_out, out, out_bfloat16, dots, stream);
  } else {
    row_dots_for<float>(p, grad_out, out, out_bfloat16, dots, stream);
  }
}

}  // namespace tandem::cuda::kernels
