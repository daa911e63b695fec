// The CUDA backend's layer normalization: Note [Fused layer norm] in layer_norm.h.

#include "cuda/layer_norm.h"

#include <algorithm>

#include "cuda/launch.cuh"
#include "cuda/reductions.h"
#include "cuda/warp_reduce.cuh"

namespace tandem::cuda::kernels {
namespace {

constexpr unsigned kFullMask = 0xffffffffu;

// kVec consecutive floats of a row, moved by one access.
template <int kVec>
struct alignas(4 * kVec) Floats {
  float v[kVec];
};

template <int kVec>
__device__ inline Floats<kVec> load(const float* p) {
  return *reinterpret_cast<const Floats<kVec>*>(p);
}

// p's floats, or `fallback` in each when p is null (no weight: 1; no bias: 0).
template <int kVec>
__device__ inline Floats<kVec> load_or(const float* p, float fallback) {
  if (p != nullptr) return load<kVec>(p);
  Floats<kVec> f;
#pragma unroll
  for (int k = 0; k < kVec; ++k) f.v[k] = fallback;
  return f;
}

// The sum of v over the warp, in every lane.
__device__ inline float warp_total(float v) { return __shfl_sync(kFullMask, warp_sum(v), 0); }

__device__ inline int64_t global_warp() { return global_thread() / 32; }
__device__ inline int64_t grid_warps() { return grid_threads() / 32; }

template <int kVec>
__device__ void forward_kernel(LayerNormArgs a, float* out, float* mean_out, float* rstd_out) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const auto cols = static_cast<float>(a.cols);
  for (int64_t row = global_warp(); row < a.rows; row += grid_warps()) {
    const float* x = a.x + row * a.cols;
    float sum = 0.0f;
    for (int64_t c = kVec * lane; c < a.cols; c += 32 * kVec) {
      const Floats<kVec> v = load<kVec>(x + c);
#pragma unroll
      for (int k = 0; k < kVec; ++k) sum += v.v[k];
    }
    const float mean = warp_total(sum) / cols;
    float squares = 0.0f;
    for (int64_t c = kVec * lane; c < a.cols; c += 32 * kVec) {
      const Floats<kVec> v = load<kVec>(x + c);
#pragma unroll
      for (int k = 0; k < kVec; ++k) squares += (v.v[k] - mean) * (v.v[k] - mean);
    }
    const float rstd = rsqrtf(warp_total(squares) / cols + a.eps);
    for (int64_t c = kVec * lane; c < a.cols; c += 32 * kVec) {
      const Floats<kVec> v = load<kVec>(x + c);
      const Floats<kVec> w = load_or<kVec>(a.weight ? a.weight + c : nullptr, 1.0f);
      const Floats<kVec> b = load_or<kVec>(a.bias ? a.bias + c : nullptr, 0.0f);
      Floats<kVec> y;
#pragma unroll
      for (int k = 0; k < kVec; ++k) y.v[k] = (v.v[k] - mean) * rstd * w.v[k] + b.v[k];
      *reinterpret_cast<Floats<kVec>*>(out + row * a.cols + c) = y;
    }
    if (lane == 0) {
      mean_out[row] = mean;
      rstd_out[row] = rstd;
    }
  }
}

// grad_x = rstd * (gy - mean(gy) - xhat * mean(gy * xhat)) per row, with xhat = (x - mean) * rstd and
// gy = grad_out * weight.
template <int kVec>
__device__ void grad_input_kernel(LayerNormArgs a, const float* grad_out, const float* mean, const float* rstd,
                                  float* grad_x) {
  const int lane = static_cast<int>(threadIdx.x % 32);
  const auto cols = static_cast<float>(a.cols);
  for (int64_t row = global_warp(); row < a.rows; row += grid_warps()) {
    const float* x = a.x + row * a.cols;
    const float* g = grad_out + row * a.cols;
    const float mu = mean[row], inv = rstd[row];
    float gy_sum = 0.0f, gy_xhat_sum = 0.0f;
    for (int64_t c = kVec * lane; c < a.cols; c += 32 * kVec) {
      const Floats<kVec> xv = load<kVec>(x + c), gv = load<kVec>(g + c);
      const Floats<kVec> w = load_or<kVec>(a.weight ? a.weight + c : nullptr, 1.0f);
#pragma unroll
      for (int k = 0; k < kVec; ++k) {
        const float gy = gv.v[k] * w.v[k];
        gy_sum += gy;
        gy_xhat_sum += gy * ((xv.v[k] - mu) * inv);
      }
    }
    const float gy_mean = warp_total(gy_sum) / cols, gy_xhat_mean = warp_total(gy_xhat_sum) / cols;
    for (int64_t c = kVec * lane; c < a.cols; c += 32 * kVec) {
      const Floats<kVec> xv = load<kVec>(x + c), gv = load<kVec>(g + c);
      const Floats<kVec> w = load_or<kVec>(a.weight ? a.weight + c : nullptr, 1.0f);
      Floats<kVec> dx;
#pragma unroll
      for (int k = 0; k < kVec; ++k)
        dx.v[k] = inv * (gv.v[k] * w.v[k] - gy_mean - (xv.v[k] - mu) * inv * gy_xhat_mean);
      *reinterpret_cast<Floats<kVec>*>(grad_x + row * a.cols + c) = dx;
    }
  }
}

constexpr int kColumnsPerBlock = 32;
constexpr int kRowLanes = kThreads / kColumnsPerBlock;
constexpr int64_t kRowsPerChunk = 64;
constexpr int64_t kMaxChunks = 512;

int64_t chunks_for(int64_t rows) { return std::clamp<int64_t>((rows + kRowsPerChunk - 1) / kRowsPerChunk, 1, kMaxChunks); }

// Block (x, y) sums grad_out * xhat and grad_out over chunk y's rows for columns [32 x, 32 x + 32): thread (tx, ty)
// takes every kRowLanes-th row of the chunk, then the block adds its kRowLanes partial sums in order. partials:
// [chunks, cols] weight sums, then [chunks, cols] bias sums.
__device__ void parameter_partials_kernel(LayerNormArgs a, const float* grad_out, const float* mean,
                                          const float* rstd, float* partials) {
  __shared__ float weight_sums[kRowLanes][kColumnsPerBlock + 1];
  __shared__ float bias_sums[kRowLanes][kColumnsPerBlock + 1];
  const int tx = static_cast<int>(threadIdx.x), ty = static_cast<int>(threadIdx.y);
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kColumnsPerBlock + tx;
  const int64_t per_chunk = (a.rows + gridDim.y - 1) / gridDim.y;
  const int64_t first = blockIdx.y * per_chunk;
  const int64_t end = first + per_chunk < a.rows ? first + per_chunk : a.rows;
  float w = 0.0f, b = 0.0f;
  if (c < a.cols) {
    for (int64_t r = first + ty; r < end; r += kRowLanes) {
      const float g = grad_out[r * a.cols + c];
      w += g * ((a.x[r * a.cols + c] - mean[r]) * rstd[r]);
      b += g;
    }
  }
  weight_sums[ty][tx] = w;
  bias_sums[ty][tx] = b;
  __syncthreads();
  if (ty != 0 || c >= a.cols) return;
  for (int k = 1; k < kRowLanes; ++k) {
    w += weight_sums[k][tx];
    b += bias_sums[k][tx];
  }
  const int64_t chunks = gridDim.y;
  partials[blockIdx.y * a.cols + c] = w;
  partials[(chunks + blockIdx.y) * a.cols + c] = b;
}

// Whether every pointer allows float4 accesses at each row start.
bool vec4_rows(int64_t cols, std::initializer_list<const void*> pointers) {
  if (cols % 4 != 0) return false;
  return std::all_of(pointers.begin(), pointers.end(), [](const void* p) { return p == nullptr || aligned16(p); });
}

int warp_blocks(int64_t rows) { return blocks_for(rows * 32); }

}  // namespace

void layer_norm_forward(const LayerNormArgs& a, float* out, float* mean, float* rstd, cudaStream_t stream) {
  if (a.rows == 0) return;
  if (vec4_rows(a.cols, {a.x, a.weight, a.bias, out})) {
    launch<forward_kernel<4>>(warp_blocks(a.rows), kThreads, stream, a, out, mean, rstd);
  } else {
    launch<forward_kernel<1>>(warp_blocks(a.rows), kThreads, stream, a, out, mean, rstd);
  }
}

int64_t layer_norm_scratch_floats(int64_t rows, int64_t cols) { return 2 * chunks_for(rows) * cols; }

void layer_norm_backward(const LayerNormArgs& a, const float* grad_out, const float* mean, const float* rstd,
                         float* grad_x, float* grad_weight, float* grad_bias, float* scratch, cudaStream_t stream) {
  if (a.rows == 0) return;
  if (grad_x != nullptr) {
    if (vec4_rows(a.cols, {a.x, a.weight, grad_out, grad_x})) {
      launch<grad_input_kernel<4>>(warp_blocks(a.rows), kThreads, stream, a, grad_out, mean, rstd, grad_x);
    } else {
      launch<grad_input_kernel<1>>(warp_blocks(a.rows), kThreads, stream, a, grad_out, mean, rstd, grad_x);
    }
  }
  if (grad_weight == nullptr && grad_bias == nullptr) return;
  const int64_t chunks = chunks_for(a.rows);
  const dim3 grid(static_cast<unsigned>((a.cols + kColumnsPerBlock - 1) / kColumnsPerBlock),
                  static_cast<unsigned>(chunks));
  launch<parameter_partials_kernel>(grid, dim3(kColumnsPerBlock, kRowLanes), stream, a, grad_out, mean, rstd,
                                    scratch);
  if (grad_weight != nullptr) sum_dim(scratch, grad_weight, 1, chunks, a.cols, stream);
  if (grad_bias != nullptr) sum_dim(scratch + chunks * a.cols, grad_bias, 1, chunks, a.cols, stream);
}

}  // namespace tandem::cuda::kernels
