// The bfloat16 attention forward on the tensor cores (Note [Fused attention] in cuda/attention.h, Note [mma
// fragments] in cuda/attention_mma.cuh): a CTA of 4 warps takes 64 query rows, 16 per warp, and walks 64-key tiles
// of K and V, copied by cp.async into two buffers so that tile j + 1 loads while tile j is used.
#include <cuda_bf16.h>

#include <cmath>

#include "cuda/attention.h"
#include "cuda/attention_mma.cuh"
#include "cuda/launch.cuh"

namespace tandem::cuda::kernels {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kWarps = 4;
constexpr int kRows = 16 * kWarps;  // query rows per CTA
constexpr int kKeys = 64;           // keys per tile
constexpr float kLog2e = 1.4426950408889634f;

template <int D>
constexpr size_t forward_shared_bytes() {
  return static_cast<size_t>(kRows + 4 * kKeys) * (D + mma::kPad) * sizeof(bf16);
}

template <typename Out>
__device__ __forceinline__ void store_pair(Out* out, int64_t i, float a, float b) {
  if constexpr (sizeof(Out) == 2) {
    *reinterpret_cast<__nv_bfloat162*>(out + i) = __floats2bfloat162_rn(a, b);
  } else {
    *reinterpret_cast<float2*>(out + i) = make_float2(a, b);
  }
}

// Dropout: whether the call drops probabilities (with_dropout in cuda/attention.h).
template <int D, typename Out, bool Dropout>
__device__ void forward_mma(AttentionProblem p, Out* out, float* lse) {
  constexpr int kStride = D + mma::kPad;
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  bf16* qs = reinterpret_cast<bf16*>(shared_bytes);
  bf16* ks = qs + kRows * kStride;  // two buffers of kKeys rows
  bf16* vs = ks + 2 * kKeys * kStride;
  const int blocks = (p.L + kRows - 1) / kRows;
  const int64_t n = blockIdx.x % p.batches;
  const int q0 = (blocks - 1 - static_cast<int>(blockIdx.x / p.batches)) * kRows;  // longest rows first
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const bf16* q = static_cast<const bf16*>(p.q.data) + p.q.offset(n);
  const bf16* k = static_cast<const bf16*>(p.k.data) + p.k.offset(n);
  const bf16* v = static_cast<const bf16*>(p.v.data) + p.v.offset(n);

  int key_end = p.S;
  if (p.causal) key_end = min(key_end, min(q0 + kRows, p.L));
  const int tiles = (key_end + kKeys - 1) / kKeys;
  mma::load_tile<D, kRows, 32 * kWarps>(qs, q, p.q.row, q0, p.L);
  if (tiles > 0) {
    mma::load_tile<D, kKeys, 32 * kWarps>(ks, k, p.k.row, 0, p.S);
    mma::load_tile<D, kKeys, 32 * kWarps>(vs, v, p.v.row, 0, p.S);
  }
  mma::commit();

  const float scale_log2 = p.scale * kLog2e;
  const detail::DropoutMask drop = Dropout ? p.dropout.resolved() : detail::DropoutMask{};
  const int row0 = q0 + warp * 16 + g, row1 = row0 + 8;  // this thread's two rows
  uint32_t qf[D / 16][4];
  float o[D / 8][4] = {};
  float m0 = -INFINITY, m1 = -INFINITY, l0 = 0.0f, l1 = 0.0f;  // l: this thread's share of the row sums
  for (int j = 0; j < tiles; ++j) {
    mma::wait_all();
    __syncthreads();  // tile j is in; every warp is done with tile j - 1, whose buffer the next copy refills
    if (j == 0) {
      for (int kk = 0; kk < D / 16; ++kk)
        mma::ldmatrix_x4(qf[kk], qs + (warp * 16 + mma::a_row(lane)) * kStride + kk * 16 + mma::a_col(lane));
    }
    if (j + 1 < tiles) {
      const int next = (j + 1) % 2;
      mma::load_tile<D, kKeys, 32 * kWarps>(ks + next * kKeys * kStride, k, p.k.row, (j + 1) * kKeys, p.S);
      mma::load_tile<D, kKeys, 32 * kWarps>(vs + next * kKeys * kStride, v, p.v.row, (j + 1) * kKeys, p.S);
    }
    mma::commit();
    const bf16* kt = ks + (j % 2) * kKeys * kStride;
    const bf16* vt = vs + (j % 2) * kKeys * kStride;
    const int k0 = j * kKeys;

    float s[kKeys / 8][4] = {};
    for (int kk = 0; kk < D / 16; ++kk) {
      for (int np = 0; np < kKeys / 16; ++np) {
        uint32_t b[4];
        mma::ldmatrix_x4(b, kt + (np * 16 + mma::bn_row(lane)) * kStride + kk * 16 + mma::bn_col(lane));
        mma::mma(s[2 * np], qf[kk], b[0], b[1]);
        mma::mma(s[2 * np + 1], qf[kk], b[2], b[3]);
      }
    }
    const bool masked = k0 + kKeys > p.S || (p.causal && k0 + kKeys - 1 > q0);
    float max0 = -INFINITY, max1 = -INFINITY;
    for (int nt = 0; nt < kKeys / 8; ++nt) {
      for (int e = 0; e < 4; ++e) {
        float x = s[nt][e] * scale_log2;
        if (masked) {
          const int key = k0 + nt * 8 + 2 * t + (e & 1), row = e < 2 ? row0 : row1;
          if (key >= p.S || (p.causal && key > row)) x = -INFINITY;
        }
        s[nt][e] = x;
      }
      max0 = fmaxf(max0, fmaxf(s[nt][0], s[nt][1]));
      max1 = fmaxf(max1, fmaxf(s[nt][2], s[nt][3]));
    }
    for (int offset = 1; offset < 4; offset *= 2) {
      max0 = fmaxf(max0, __shfl_xor_sync(0xffffffffu, max0, offset));
      max1 = fmaxf(max1, __shfl_xor_sync(0xffffffffu, max1, offset));
    }
    const float new0 = fmaxf(m0, max0), new1 = fmaxf(m1, max1);
    const float shift0 = new0 == -INFINITY ? 0.0f : new0, shift1 = new1 == -INFINITY ? 0.0f : new1;
    const float alpha0 = exp2f(m0 - shift0), alpha1 = exp2f(m1 - shift1);
    m0 = new0;
    m1 = new1;
    l0 *= alpha0;
    l1 *= alpha1;
    for (int nt = 0; nt < D / 8; ++nt) {
      o[nt][0] *= alpha0;
      o[nt][1] *= alpha0;
      o[nt][2] *= alpha1;
      o[nt][3] *= alpha1;
    }
    for (int nt = 0; nt < kKeys / 8; ++nt) {
      s[nt][0] = exp2f(s[nt][0] - shift0);
      s[nt][1] = exp2f(s[nt][1] - shift0);
      s[nt][2] = exp2f(s[nt][2] - shift1);
      s[nt][3] = exp2f(s[nt][3] - shift1);
      l0 += s[nt][0] + s[nt][1];
      l1 += s[nt][2] + s[nt][3];
    }
    if constexpr (Dropout) {
      for (int nt = 0; nt < kKeys / 8; ++nt)
        for (int e = 0; e < 4; ++e)
          s[nt][e] *= drop.factor(mask_index(p, n, e < 2 ? row0 : row1, k0 + nt * 8 + 2 * t + (e & 1)));
    }
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      uint32_t a[4];
      mma::a_from_c(a, s[2 * kk], s[2 * kk + 1]);
      for (int ep = 0; ep < D / 16; ++ep) {
        uint32_t b[4];
        mma::ldmatrix_x4_trans(b, vt + (kk * 16 + mma::bk_row(lane)) * kStride + ep * 16 + mma::bk_col(lane));
        mma::mma(o[2 * ep], a, b[0], b[1]);
        mma::mma(o[2 * ep + 1], a, b[2], b[3]);
      }
    }
  }
  mma::wait_all();  // the copies of a CTA without key tiles (S == 0)
  for (int offset = 1; offset < 4; offset *= 2) {
    l0 += __shfl_xor_sync(0xffffffffu, l0, offset);
    l1 += __shfl_xor_sync(0xffffffffu, l1, offset);
  }
  const float inv0 = 1.0f / l0, inv1 = 1.0f / l1;  // inf without keys: out is 0 * inf = NaN
  for (int nt = 0; nt < D / 8; ++nt) {
    const int col = nt * 8 + 2 * t;
    if (row0 < p.L) store_pair(out, p.out.at(n, row0) + col, o[nt][0] * inv0, o[nt][1] * inv0);
    if (row1 < p.L) store_pair(out, p.out.at(n, row1) + col, o[nt][2] * inv1, o[nt][3] * inv1);
  }
  if (t == 0) {
    constexpr float kLn2 = 0.6931471805599453f;
    if (row0 < p.L) lse[n * p.L + row0] = (m0 + log2f(l0)) * kLn2;  // -inf without keys
    if (row1 < p.L) lse[n * p.L + row1] = (m1 + log2f(l1)) * kLn2;
  }
}

template <int D, typename Out>
void forward_for(const AttentionProblem& p, void* out, float* lse, cudaStream_t stream) {
  const int64_t blocks = (p.L + kRows - 1) / kRows * p.batches;
  with_dropout(p, [&](auto dropout) {
    launch_with_shared<forward_mma<D, Out, decltype(dropout)::value>>(dim3(static_cast<unsigned>(blocks)),
                                                                      dim3(32 * kWarps), forward_shared_bytes<D>(),
                                                                      stream, p, static_cast<Out*>(out), lse);
  });
}

template <typename Out>
void forward_for_out(const AttentionProblem& p, void* out, float* lse, cudaStream_t stream) {
  switch (p.E) {
    case 32: return forward_for<32, Out>(p, out, lse, stream);
    case 64: return forward_for<64, Out>(p, out, lse, stream);
    default: return forward_for<128, Out>(p, out, lse, stream);
  }
}

}  // namespace

void attention_forward_mma(const AttentionProblem& p, void* out, bool out_bfloat16, float* lse, cudaStream_t stream) {
  if (out_bfloat16) {
    forward_for_out<bf16>(p, out, lse, stream);
  } else {
    forward_for_out<float>(p, out, lse, stream);
  }
}

}  // namespace tandem::cuda::kernels
