// The float32 attention kernels on the CUDA cores (Note [Fused attention] in cuda/attention.h): 32 x 32 tiles in
// shared memory, 128 threads, four threads to a row (a quad), float32 products and sums with expf.
#include <cuda_bf16.h>

#include <cmath>

#include "cuda/attention.h"
#include "cuda/launch.cuh"

namespace tandem::cuda::kernels {
namespace {

constexpr int kTile = 32;      // query rows and keys per tile
constexpr int kSimtThreads = 128;

// Shared memory of one tile of kTile rows of D floats, padded by one so that rows fall in different banks.
template <int D>
constexpr int kTileFloats = kTile * (D + 1);

// Copies rows [first, first + kTile) of matrix `base` (row stride `row`) into tile, zeros past `rows`.
template <int D>
__device__ void load_tile(float* tile, const float* base, int64_t row, int first, int rows) {
  for (int i = threadIdx.x; i < kTile * D; i += kSimtThreads) {
    const int r = i / D, e = i % D;
    tile[r * (D + 1) + e] = first + r < rows ? base[(first + r) * row + e] : 0.0f;
  }
}

__device__ float dot_rows(const float* a, const float* b, int d) {
  float sum = 0.0f;
  for (int e = 0; e < d; ++e) sum = fmaf(a[e], b[e], sum);
  return sum;
}

__device__ void store_value(void* out, int64_t i, float v, bool bfloat16) {
  if (bfloat16) {
    static_cast<__nv_bfloat16*>(out)[i] = __float2bfloat16_rn(v);
  } else {
    static_cast<float*>(out)[i] = v;
  }
}

// One CTA: query rows [q0, q0 + 32) of matrix n. Thread (r, c) = (tid / 4, tid % 4) scores keys c, c + 4, ... of each
// key tile for row r and accumulates out[r][c + 4 i].
template <int D>
__device__ void forward_simt(AttentionProblem p, void* out, bool out_bfloat16, float* lse) {
  extern __shared__ float shared[];
  float* qs = shared;
  float* ks = qs + kTileFloats<D>;
  float* vs = ks + kTileFloats<D>;
  float* ps = vs + kTileFloats<D>;  // kTile x (kTile + 1)
  const int blocks = (p.L + kTile - 1) / kTile;
  const int64_t n = blockIdx.x % p.batches;
  const int q0 = (blocks - 1 - static_cast<int>(blockIdx.x / p.batches)) * kTile;
  const int r = threadIdx.x / 4, c = threadIdx.x % 4, query = q0 + r;
  const float* q = static_cast<const float*>(p.q.data) + p.q.offset(n);
  const float* k = static_cast<const float*>(p.k.data) + p.k.offset(n);
  const float* v = static_cast<const float*>(p.v.data) + p.v.offset(n);
  load_tile<D>(qs, q, p.q.row, q0, p.L);
  float acc[D / 4] = {};
  float m = -INFINITY, l = 0.0f;
  const detail::DropoutMask drop = p.dropout.resolved();
  int key_end = p.S;
  if (p.causal) key_end = min(key_end, min(q0 + kTile, p.L));
  for (int k0 = 0; k0 < key_end; k0 += kTile) {
    __syncthreads();  // the previous tiles are used up
    load_tile<D>(ks, k, p.k.row, k0, p.S);
    load_tile<D>(vs, v, p.v.row, k0, p.S);
    __syncthreads();
    float s[kTile / 4];
    float largest = -INFINITY;
    for (int j = 0; j < kTile / 4; ++j) {
      const int key = k0 + c + 4 * j;
      s[j] = dot_rows(qs + r * (D + 1), ks + (c + 4 * j) * (D + 1), D) * p.scale;
      if (key >= p.S || (p.causal && key > query)) s[j] = -INFINITY;
      largest = fmaxf(largest, s[j]);
    }
    largest = fmaxf(largest, __shfl_xor_sync(0xffffffffu, largest, 1));
    largest = fmaxf(largest, __shfl_xor_sync(0xffffffffu, largest, 2));
    const float m_new = fmaxf(m, largest);
    const float shift = m_new == -INFINITY ? 0.0f : m_new;
    const float alpha = expf(m - shift);
    float sum = 0.0f;
    for (int j = 0; j < kTile / 4; ++j) {
      const float pj = expf(s[j] - shift);
      sum += pj;
      const float z = drop.active() ? drop.factor(mask_index(p, n, query, k0 + c + 4 * j)) : 1.0f;
      ps[r * (kTile + 1) + c + 4 * j] = pj * z;
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    l = l * alpha + sum;
    m = m_new;
    __syncwarp();  // the quad's probabilities are visible to the quad
    for (int i = 0; i < D / 4; ++i) acc[i] *= alpha;
    for (int j = 0; j < kTile; ++j) {
      const float pj = ps[r * (kTile + 1) + j];
      for (int i = 0; i < D / 4; ++i) acc[i] = fmaf(pj, vs[j * (D + 1) + c + 4 * i], acc[i]);
    }
    __syncwarp();  // read before the next tile's probabilities overwrite them
  }
  if (query >= p.L) return;
  const int64_t start = p.out.at(n, query);
  for (int i = 0; i < D / 4; ++i) store_value(out, start + c + 4 * i, acc[i] / l, out_bfloat16);
  if (c == 0) lse[n * p.L + query] = m + logf(l);  // -inf without keys
}

// One CTA: keys [k0, k0 + 32) of matrix n. Thread (r, c) holds dK and dV of key r at columns c + 4 i; for dQ it
// takes query row r of the tile instead.
template <int D>
__device__ void backward_simt(AttentionProblem p, AttentionOperand grad_out, const float* lse, const float* dots,
                              float* dq, float* dk, float* dv) {
  extern __shared__ float shared[];
  float* ks = shared;
  float* vs = ks + kTileFloats<D>;
  float* qs = vs + kTileFloats<D>;
  float* dos = qs + kTileFloats<D>;
  float* pts = dos + kTileFloats<D>;     // P^T: kTile keys x (kTile + 1) queries
  float* dsts = pts + kTile * (kTile + 1); // dS^T
  float* lses = dsts + kTile * (kTile + 1);
  float* ds = lses + kTile;
  const int64_t n = blockIdx.x % p.batches;
  const int k0 = static_cast<int>(blockIdx.x / p.batches) * kTile;
  const int r = threadIdx.x / 4, c = threadIdx.x % 4, key = k0 + r;
  const float* q = static_cast<const float*>(p.q.data) + p.q.offset(n);
  const float* k = static_cast<const float*>(p.k.data) + p.k.offset(n);
  const float* v = static_cast<const float*>(p.v.data) + p.v.offset(n);
  const float* dout = static_cast<const float*>(grad_out.data) + grad_out.offset(n);
  load_tile<D>(ks, k, p.k.row, k0, p.S);
  load_tile<D>(vs, v, p.v.row, k0, p.S);
  float dk_acc[D / 4] = {}, dv_acc[D / 4] = {};
  const detail::DropoutMask drop = p.dropout.resolved();
  for (int q0 = p.causal ? k0 / kTile * kTile : 0; q0 < p.L; q0 += kTile) {
    __syncthreads();  // the previous tiles are used up
    load_tile<D>(qs, q, p.q.row, q0, p.L);
    load_tile<D>(dos, dout, grad_out.row, q0, p.L);
    if (threadIdx.x < kTile) {
      const bool inside = q0 + threadIdx.x < p.L;
      lses[threadIdx.x] = inside ? lse[n * p.L + q0 + threadIdx.x] : INFINITY;  // rows past L: P = 0
      ds[threadIdx.x] = inside ? dots[n * p.L + q0 + threadIdx.x] : 0.0f;
    }
    __syncthreads();
    for (int j = 0; j < kTile / 4; ++j) {
      const int col = c + 4 * j, query = q0 + col;
      const float s = dot_rows(ks + r * (D + 1), qs + col * (D + 1), D) * p.scale;
      float pj = expf(s - lses[col]);
      if (key >= p.S || (p.causal && key > query)) pj = 0.0f;
      const float dp = dot_rows(vs + r * (D + 1), dos + col * (D + 1), D);
      const float z = drop.active() ? drop.factor(mask_index(p, n, query, key)) : 1.0f;
      pts[r * (kTile + 1) + col] = pj * z;
      dsts[r * (kTile + 1) + col] = pj * (z * dp - ds[col]);
    }
    __syncthreads();
    for (int j = 0; j < kTile; ++j) {
      const float pj = pts[r * (kTile + 1) + j], dsj = dsts[r * (kTile + 1) + j];
      for (int i = 0; i < D / 4; ++i) {
        dv_acc[i] = fmaf(pj, dos[j * (D + 1) + c + 4 * i], dv_acc[i]);
        dk_acc[i] = fmaf(dsj, qs[j * (D + 1) + c + 4 * i], dk_acc[i]);
      }
    }
    if (q0 + r < p.L) {  // dQ of query row q0 + r: this tile's keys
      float* dq_row = dq + p.dq.at(n, q0 + r);
      for (int i = 0; i < D / 4; ++i) {
        float sum = 0.0f;
        for (int j = 0; j < kTile; ++j) sum = fmaf(dsts[j * (kTile + 1) + r], ks[j * (D + 1) + c + 4 * i], sum);
        atomicAdd(dq_row + c + 4 * i, sum * p.scale);
      }
    }
  }
  if (key >= p.S) return;
  const int64_t dk_start = p.dk.at(n, key), dv_start = p.dv.at(n, key);
  for (int i = 0; i < D / 4; ++i) {
    dk[dk_start + c + 4 * i] = dk_acc[i] * p.scale;
    dv[dv_start + c + 4 * i] = dv_acc[i];
  }
}

template <int D>
void forward_simt_for(const AttentionProblem& p, void* out, bool out_bfloat16, float* lse, cudaStream_t stream) {
  const int64_t blocks = (p.L + kTile - 1) / kTile * p.batches;
  const size_t shared = (3 * kTileFloats<D> + kTile * (kTile + 1)) * sizeof(float);
  launch_with_shared<forward_simt<D>>(dim3(static_cast<unsigned>(blocks)), dim3(kSimtThreads), shared, stream, p, out,
                                      out_bfloat16, lse);
}

template <int D>
void backward_simt_for(const AttentionProblem& p, AttentionOperand grad_out, const float* lse, const float* dots,
                       float* dq, float* dk, float* dv, cudaStream_t stream) {
  const int64_t blocks = (p.S + kTile - 1) / kTile * p.batches;
  const size_t shared = (4 * kTileFloats<D> + 2 * kTile * (kTile + 1) + 2 * kTile) * sizeof(float);
  launch_with_shared<backward_simt<D>>(dim3(static_cast<unsigned>(blocks)), dim3(kSimtThreads), shared, stream, p,
                                       grad_out, lse, dots, dq, dk, dv);
}

}  // namespace

void attention_forward_simt(const AttentionProblem& p, void* out, bool out_bfloat16, float* lse, cudaStream_t stream) {
  switch (p.E) {
    case 32: return forward_simt_for<32>(p, out, out_bfloat16, lse, stream);
    case 64: return forward_simt_for<64>(p, out, out_bfloat16, lse, stream);
    default: return forward_simt_for<128>(p, out, out_bfloat16, lse, stream);
  }
}

void attention_backward_simt(const AttentionProblem& p, AttentionOperand grad_out, const float* lse,
                             const float* dots, float* dq, float* dk, float* dv, cudaStream_t stream) {
  switch (p.E) {
    case 32: return backward_simt_for<32>(p, grad_out, lse, dots, dq, dk, dv, stream);
    case 64: return backward_simt_for<64>(p, grad_out, lse, dots, dq, dk, dv, stream);
    default: return backward_simt_for<128>(p, grad_out, lse, dots, dq, dk, dv, stream);
  }
}

}  // namespace tandem::cuda::kernels
