// The bfloat16 attention backward on the tensor cores (Note [Fused attention] in cuda/attention.h, Note [mma
// fragments] in cuda/attention_mma.cuh): a CTA of 4 warps takes 64 keys, 16 per warp, keeps their dK and dV in
// registers and walks 64-query tiles of Q, dO, lse and D, copied by cp.async into two buffers. Per tile each warp
// computes S^T = K Q^T and dP^T = V dO^T for its keys, P^T = exp(scale S^T - lse) and dS^T = P^T (Z dP^T - D), adds
// (P Z)^T dO to dV and dS^T Q to dK (Z the dropout factors, 1 without dropout), and stores dS^T in shared memory;
// then the warps split the tile's queries for
// dQ = dS K, added to the float32 dQ in global memory.
#include <cuda_bf16.h>

#include <cmath>

#include "cuda/attention.h"
#include "cuda/attention_mma.cuh"
#include "cuda/launch.cuh"

namespace tandem::cuda::kernels {
namespace {

using bf16 = __nv_bfloat16;

constexpr int kWarps = 4;
constexpr int kKeys = 16 * kWarps;  // keys per CTA
constexpr int kQueries = 64;        // queries per tile
constexpr int kDsStride = kQueries + mma::kPad;
constexpr float kLog2e = 1.4426950408889634f;

template <int D>
constexpr size_t backward_shared_bytes() {
  return static_cast<size_t>(2 * kKeys + 4 * kQueries) * (D + mma::kPad) * sizeof(bf16) +
         static_cast<size_t>(kKeys) * kDsStride * sizeof(bf16) + 4 * kQueries * sizeof(float);
}

// dq[0..1] += (a, b).
__device__ __forceinline__ void add_pair(float* dq, float a, float b) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  atomicAdd(reinterpret_cast<float2*>(dq), make_float2(a, b));
#else
  atomicAdd(dq, a);
  atomicAdd(dq + 1, b);
#endif
}

// Dropout: whether the call drops probabilities (with_dropout in cuda/attention.h).
template <int D, bool Dropout>
__device__ void backward_mma(AttentionProblem p, AttentionOperand grad_out, const float* lse, const float* dots,
                             float* dq, float* dk, float* dv) {
  constexpr int kStride = D + mma::kPad;
  extern __shared__ __align__(16) unsigned char shared_bytes[];
  float* lses = reinterpret_cast<float*>(shared_bytes);  // two buffers of kQueries
  float* ds = lses + 2 * kQueries;                       // D, two buffers
  bf16* ks = reinterpret_cast<bf16*>(ds + 2 * kQueries);
  bf16* vs = ks + kKeys * kStride;
  bf16* qs = vs + kKeys * kStride;      // two buffers
  bf16* dos = qs + 2 * kQueries * kStride;  // two buffers
  bf16* dsts = dos + 2 * kQueries * kStride;  // dS^T: kKeys x kQueries
  const int64_t n = blockIdx.x % p.batches;
  const int k0 = static_cast<int>(blockIdx.x / p.batches) * kKeys;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const bf16* q = static_cast<const bf16*>(p.q.data) + p.q.offset(n);
  const bf16* k = static_cast<const bf16*>(p.k.data) + p.k.offset(n);
  const bf16* v = static_cast<const bf16*>(p.v.data) + p.v.offset(n);
  const bf16* dout = static_cast<const bf16*>(grad_out.data) + grad_out.offset(n);
  const float* lse_n = lse + n * p.L;
  const float* dots_n = dots + n * p.L;

  // Copies query tile q0 into buffer b (rows past L: zeros, masked below).
  const auto load_queries = [&](int q0, int b) {
    mma::load_tile<D, kQueries, 32 * kWarps>(qs + b * kQueries * kStride, q, p.q.row, q0, p.L);
    mma::load_tile<D, kQueries, 32 * kWarps>(dos + b * kQueries * kStride, dout, grad_out.row, q0, p.L);
    if (threadIdx.x < kQueries) {
      const int i = q0 + threadIdx.x;
      mma::copy4(lses + b * kQueries + threadIdx.x, lse_n + (i < p.L ? i : 0), i < p.L);
    } else if (threadIdx.x < 2 * kQueries) {
      const int i = q0 + threadIdx.x - kQueries;
      mma::copy4(ds + b * kQueries + threadIdx.x - kQueries, dots_n + (i < p.L ? i : 0), i < p.L);
    }
  };

  const int first = p.causal ? k0 / kQueries * kQueries : 0;  // queries before k0 see none of these keys
  const int tiles = first < p.L ? (p.L - first + kQueries - 1) / kQueries : 0;
  mma::load_tile<D, kKeys, 32 * kWarps>(ks, k, p.k.row, k0, p.S);
  mma::load_tile<D, kKeys, 32 * kWarps>(vs, v, p.v.row, k0, p.S);
  if (tiles > 0) load_queries(first, 0);
  mma::commit();

  const float scale_log2 = p.scale * kLog2e;
  const detail::DropoutMask drop = Dropout ? p.dropout.resolved() : detail::DropoutMask{};
  const int key0 = k0 + warp * 16 + g, key1 = key0 + 8;  // this thread's two keys
  float dk_acc[D / 8][4] = {}, dv_acc[D / 8][4] = {};
  for (int j = 0; j < tiles; ++j) {
    mma::wait_all();
    __syncthreads();  // tile j is in; every warp is done with tile j - 1 and with dS^T
    const int q0 = first + j * kQueries;
    if (j + 1 < tiles) load_queries(q0 + kQueries, (j + 1) % 2);
    mma::commit();
    const bf16* qt = qs + (j % 2) * kQueries * kStride;
    const bf16* dot = dos + (j % 2) * kQueries * kStride;
    const float* lset = lses + (j % 2) * kQueries;
    const float* dt = ds + (j % 2) * kQueries;

    // S^T and dP^T, 16 keys x 64 queries per warp.
    float st[kQueries / 8][4] = {}, dpt[kQueries / 8][4] = {};
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t ka[4], va[4];
      mma::ldmatrix_x4(ka, ks + (warp * 16 + mma::a_row(lane)) * kStride + kk * 16 + mma::a_col(lane));
      mma::ldmatrix_x4(va, vs + (warp * 16 + mma::a_row(lane)) * kStride + kk * 16 + mma::a_col(lane));
      for (int np = 0; np < kQueries / 16; ++np) {
        uint32_t b[4];
        mma::ldmatrix_x4(b, qt + (np * 16 + mma::bn_row(lane)) * kStride + kk * 16 + mma::bn_col(lane));
        mma::mma(st[2 * np], ka, b[0], b[1]);
        mma::mma(st[2 * np + 1], ka, b[2], b[3]);
        mma::ldmatrix_x4(b, dot + (np * 16 + mma::bn_row(lane)) * kStride + kk * 16 + mma::bn_col(lane));
        mma::mma(dpt[2 * np], va, b[0], b[1]);
        mma::mma(dpt[2 * np + 1], va, b[2], b[3]);
      }
    }
    // P^T and dS^T in place of S^T and dP^T.
    const bool masked = k0 + kKeys > p.S || q0 + kQueries > p.L || (p.causal && k0 + kKeys - 1 > q0);
    for (int nt = 0; nt < kQueries / 8; ++nt) {
      for (int e = 0; e < 4; ++e) {
        const int col = nt * 8 + 2 * t + (e & 1), key = e < 2 ? key0 : key1;
        float pe = exp2f(st[nt][e] * scale_log2 - lset[col] * kLog2e);
        if (masked && (key >= p.S || q0 + col >= p.L || (p.causal && key > q0 + col))) pe = 0.0f;
        const float z = Dropout ? drop.factor(mask_index(p, n, q0 + col, key)) : 1.0f;
        st[nt][e] = pe * z;
        dpt[nt][e] = pe * (z * dpt[nt][e] - dt[col]);
      }
    }
    // dV += P^T dO and dK += dS^T Q, k over the tile's queries.
    for (int kk = 0; kk < kQueries / 16; ++kk) {
      uint32_t pa[4], dsa[4];
      mma::a_from_c(pa, st[2 * kk], st[2 * kk + 1]);
      mma::a_from_c(dsa, dpt[2 * kk], dpt[2 * kk + 1]);
      for (int ep = 0; ep < D / 16; ++ep) {
        uint32_t b[4];
        mma::ldmatrix_x4_trans(b, dot + (kk * 16 + mma::bk_row(lane)) * kStride + ep * 16 + mma::bk_col(lane));
        mma::mma(dv_acc[2 * ep], pa, b[0], b[1]);
        mma::mma(dv_acc[2 * ep + 1], pa, b[2], b[3]);
        mma::ldmatrix_x4_trans(b, qt + (kk * 16 + mma::bk_row(lane)) * kStride + ep * 16 + mma::bk_col(lane));
        mma::mma(dk_acc[2 * ep], dsa, b[0], b[1]);
        mma::mma(dk_acc[2 * ep + 1], dsa, b[2], b[3]);
      }
    }
    for (int nt = 0; nt < kQueries / 8; ++nt) {
      const int col = nt * 8 + 2 * t;
      *reinterpret_cast<uint32_t*>(dsts + (warp * 16 + g) * kDsStride + col) = mma::pack(dpt[nt][0], dpt[nt][1]);
      *reinterpret_cast<uint32_t*>(dsts + (warp * 16 + g + 8) * kDsStride + col) = mma::pack(dpt[nt][2], dpt[nt][3]);
    }
    __syncthreads();  // dS^T complete
    // dQ = dS K for queries [16 warp, 16 warp + 16) of the tile, k over the CTA's keys. The A fragment of dS comes
    // from dS^T by transposed loads (rows: keys, columns: queries).
    float dq_acc[D / 8][4] = {};
    for (int kk = 0; kk < kKeys / 16; ++kk) {
      uint32_t a[4];
      mma::ldmatrix_x4_trans(a, dsts + (kk * 16 + (lane & 7) + ((lane >> 4) & 1) * 8) * kDsStride + warp * 16 +
                                    ((lane >> 3) & 1) * 8);
      for (int ep = 0; ep < D / 16; ++ep) {
        uint32_t b[4];
        mma::ldmatrix_x4_trans(b, ks + (kk * 16 + mma::bk_row(lane)) * kStride + ep * 16 + mma::bk_col(lane));
        mma::mma(dq_acc[2 * ep], a, b[0], b[1]);
        mma::mma(dq_acc[2 * ep + 1], a, b[2], b[3]);
      }
    }
    const int query0 = q0 + warp * 16 + g, query1 = query0 + 8;
    for (int nt = 0; nt < D / 8; ++nt) {
      const int col = nt * 8 + 2 * t;
      if (query0 < p.L) {
        add_pair(dq + p.dq.at(n, query0) + col, dq_acc[nt][0] * p.scale, dq_acc[nt][1] * p.scale);
      }
      if (query1 < p.L) {
        add_pair(dq + p.dq.at(n, query1) + col, dq_acc[nt][2] * p.scale, dq_acc[nt][3] * p.scale);
      }
    }
  }
  mma::wait_all();  // the copies of a CTA without query tiles
  for (int nt = 0; nt < D / 8; ++nt) {
    const int col = nt * 8 + 2 * t;
    if (key0 < p.S) {
      *reinterpret_cast<float2*>(dk + p.dk.at(n, key0) + col) =
          make_float2(dk_acc[nt][0] * p.scale, dk_acc[nt][1] * p.scale);
      *reinterpret_cast<float2*>(dv + p.dv.at(n, key0) + col) = make_float2(dv_acc[nt][0], dv_acc[nt][1]);
    }
    if (key1 < p.S) {
      *reinterpret_cast<float2*>(dk + p.dk.at(n, key1) + col) =
          make_float2(dk_acc[nt][2] * p.scale, dk_acc[nt][3] * p.scale);
      *reinterpret_cast<float2*>(dv + p.dv.at(n, key1) + col) = make_float2(dv_acc[nt][2], dv_acc[nt][3]);
    }
  }
}

template <int D>
void backward_for(const AttentionProblem& p, AttentionOperand grad_out, const float* lse, const float* dots, float* dq,
                  float* dk, float* dv, cudaStream_t stream) {
  const int64_t blocks = (p.S + kKeys - 1) / kKeys * p.batches;
  with_dropout(p, [&](auto dropout) {
    launch_with_shared<backward_mma<D, decltype(dropout)::value>>(dim3(static_cast<unsigned>(blocks)),
                                                                  dim3(32 * kWarps), backward_shared_bytes<D>(),
                                                                  stream, p, grad_out, lse, dots, dq, dk, dv);
  });
}

}  // namespace

void attention_backward_mma(const AttentionProblem& p, AttentionOperand grad_out, const float* lse,
                            const float* dots, float* dq, float* dk, float* dv, cudaStream_t stream) {
  switch (p.E) {
    case 32: return backward_for<32>(p, grad_out, lse, dots, dq, dk, dv, stream);
    case 64: return backward_for<64>(p, grad_out, lse, dots, dq, dk, dv, stream);
    default: return backward_for<128>(p, grad_out, lse, dots, dq, dk, dv, stream);
  }
}

}  // namespace tandem::cuda::kernels
