#pragma once
// The CUDA backend's fused attention (Backend::attention_forward / attention_backward): host launchers over raw
// device pointers; the caller (cuda/attention.cpp) has checked the call (backend::AttentionCall) and set the device.
//
// Note [Fused attention]: FlashAttention-2's algorithm (Dao, 2023), the [L, S] scores never in global memory.
// Forward: one CTA per block of query rows of one matrix n (grid.x = query blocks x N, the blocks with the most keys
// first), its warps splitting the rows. It walks the key blocks, each K and V tile staged in shared memory, and keeps
// per row the running maximum m of the scaled scores, the running denominator l and the unnormalized output O
// (online softmax): for a new block of scores s, m' = max(m, max s), p = exp(s - m'), l = l e^(m - m') + sum p and
// O = O e^(m - m') + p V. At the end out = O / l and lse = m + log l, which is all the backward keeps. With
// is_causal, key j is left out for query i when j > i: the key blocks that lie wholly after the CTA's last query are
// never visited, and only the blocks on the diagonal (or past S, the tail tile) evaluate the mask. Rows past L and
// keys past S are zero-filled in shared memory and masked, so any L and S work.
// Backward: D = rowsum(dO * O) first (attention_row_dots). Then one CTA per block of keys, its warps splitting the
// keys; it walks the query blocks (from the diagonal on with is_causal), recomputes P = exp(scale q k^T - lse) from
// the saved lse, and accumulates dV += P^T dO and dK += dS^T Q in registers, with dP = dO V^T and dS = P * (dP - D);
// each CTA's share of dQ = dS K goes to a float32 dQ in global memory by atomic adds (dQ is zeroed first), so dK,
// dV are written once and dQ sums over the key blocks.
// Dropout (AttentionCall::dropout): the forward multiplies each probability by its mask factor Z (0 or 1 / (1 - p),
// drawn in place from its index, never stored) after adding it to l and before P V, so out = (P * Z) V with P the
// softmax; the backward redraws the same factors, adds (P * Z)^T dO to dV and takes dS = P * (Z dP - D), where
// D = rowsum(dO * out) is still sum_j P Z dP.
// Two kernel families: float32 operands on the CUDA cores (FFMA, float32 sums: attention_simt.cu, exact to float
// rounding), and bfloat16 operands on the tensor cores (mma.sync m16n8k16 bf16 -> fp32, operands from shared memory
// by ldmatrix, tiles copied by cp.async into two buffers so that the next tile loads while this one is used:
// attention_forward.cu, attention_backward.cu). In the bfloat16 forward, P is rounded to bfloat16 for P V (as
// FlashAttention); in the backward P and dS are, for their products. Every launch is on the given stream, with no
// host synchronization and no memory but the caller's: capturable in a CUDA graph.

#include <cuda_runtime.h>

#include <cstdint>
#include <type_traits>

#include "backend.h"

namespace tandem::cuda {

// Backend::attention_forward and attention_backward on `stream` (cuda/attention.cpp).
void attention_forward(const backend::AttentionCall& call, const Tensor& out, const Tensor& lse, cudaStream_t stream);
void attention_backward(const backend::AttentionCall& call, const Tensor& out, const Tensor& grad_out,
                        const Tensor& lse, const Tensor& grad_q, const Tensor& grad_k, const Tensor& grad_v,
                        cudaStream_t stream);

}  // namespace tandem::cuda

namespace tandem::cuda::kernels {

// The layout of a tensor [B1, B2, rows, E] of an attention call: matrix n = b1 * B2 + b2 starts at offset(n) and its
// row r at at(n, r) (elements from the tensor's start; stride 1 along E).
struct AttentionLayout {
  int64_t b2 = 1;
  int64_t batch1 = 0, batch2 = 0, row = 0;
  __host__ __device__ int64_t offset(int64_t n) const { return (n / b2) * batch1 + (n % b2) * batch2; }
  __host__ __device__ int64_t at(int64_t n, int64_t r) const { return offset(n) + r * row; }
};

// One operand of an attention call: its data in its layout.
struct AttentionOperand : AttentionLayout {
  const void* data = nullptr;
};

struct AttentionProblem {
  AttentionOperand q, k, v;  // of one dtype: float32 (the SIMT kernels) or bfloat16 (the tensor-core kernels)
  int64_t batches = 0;       // N
  int L = 0, S = 0, E = 0;   // E: 32, 64 or 128
  float scale = 1.0f;
  bool causal = false;
  bool bfloat16 = false;     // the operands' dtype
  detail::DropoutMask dropout;  // on the probabilities of P V, where active (backend::AttentionCall::dropout)
  // The outputs' layouts (their data are the launchers' pointers): the forward's out (which the backward reads
  // back), the backward's dq, dk and dv.
  AttentionLayout out, dq, dk, dv;
};

// The index of probability (n, row, key) in the dropout mask ([N, L, S] row-major).
__host__ __device__ inline uint64_t mask_index(const AttentionProblem& p, int64_t n, int row, int key) {
  return (static_cast<uint64_t>(n) * static_cast<uint64_t>(p.L) + static_cast<uint64_t>(row)) *
             static_cast<uint64_t>(p.S) +
         static_cast<uint64_t>(key);
}

// Calls fn(std::true_type{}) for a problem with dropout and fn(std::false_type{}) without: the tensor-core kernels
// take dropout as a template parameter, so that the kernels without it carry none of its registers.
template <typename Fn>
void with_dropout(const AttentionProblem& p, Fn&& fn) {
  if (p.dropout.active()) {
    fn(std::true_type{});
  } else {
    fn(std::false_type{});
  }
}

// dots[n * L + i] = sum_e grad_out[n, i, e] * out[n, i, e] in float32; grad_out in the operands' dtype and layout,
// out in p.out's layout as the forward wrote it.
void attention_row_dots(const AttentionProblem& p, AttentionOperand grad_out, const void* out, bool out_bfloat16,
                        float* dots, cudaStream_t stream);

// The forward: out ([N, L, E] in p.out's layout, bfloat16 when out_bfloat16, else float32) and lse (contiguous
// float32 [N, L]). The backward: dq, dk, dv float32 [N, L or S, E] in p.dq's, p.dk's and p.dv's layouts; dq must be
// zero (it is accumulated into), dk and dv are written; lse and dots (attention_row_dots) as the forward and row dots
// left them. One launcher pair per family:
// float32 operands (attention_simt.cu), bfloat16 operands (attention_forward.cu, attention_backward.cu).
void attention_forward_simt(const AttentionProblem& p, void* out, bool out_bfloat16, float* lse, cudaStream_t stream);
void attention_backward_simt(const AttentionProblem& p, AttentionOperand grad_out, const float* lse,
                             const float* dots, float* dq, float* dk, float* dv, cudaStream_t stream);
void attention_forward_mma(const AttentionProblem& p, void* out, bool out_bfloat16, float* lse, cudaStream_t stream);
void attention_backward_mma(const AttentionProblem& p, AttentionOperand grad_out, const float* lse,
                            const float* dots, float* dq, float* dk, float* dv, cudaStream_t stream);

}  // namespace tandem::cuda::kernels
