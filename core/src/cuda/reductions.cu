// The CUDA backend's reductions: sums along one dimension (a warp or a block per row, or columns side by side),
// deterministic sums and norms over every element (Note [Deterministic reductions] in reductions.h), and the maximum,
// minimum and log-sum-exp along one dimension (a warp per row when the reduced dimension is innermost, a thread per
// output otherwise). See reductions.h for the contracts.

#include <algorithm>
#include <cmath>
#include <limits>

#include "cuda/launch.cuh"
#include "cuda/reductions.h"
#include "cuda/warp_reduce.cuh"
#include "tandem/core/error.h"

namespace tandem::cuda::kernels {
namespace {

constexpr int64_t kMaxReduceBlocks = 1024;  // partial sums of the first reduction pass
constexpr int64_t kReducePerThread = 8;     // elements per thread before another block is worth it
// A reduction of up to kSinglePassElements elements takes one block of kSinglePassThreads threads (the most a block
// has, and what block_reduce's 32 warp slots hold), each looping over at most 64 elements: one launch, where two
// passes would take two (Note [Deterministic reductions] in reductions.h).
constexpr int kSinglePassThreads = 1024;
constexpr int64_t kSinglePassElements = int64_t{64} * kSinglePassThreads;
// Row sums of fewer rows than this (about two per SM) give each row a block of kSinglePassThreads.
constexpr int64_t kFewRows = 256;

// ---- sums and norms over every element --------------------------------------------------------------------

// How partial results combine: Add (warp_reduce.cuh), or this; 0 is the identity of both (maxima are taken over
// magnitudes only).
struct MaxKeepingNan {
  __device__ float operator()(float a, float b) const { return a > b || isnan(a) ? a : b; }
};

struct LoadValue {
  const float* x;
  __device__ float operator()(int64_t i) const { return x[i]; }
};
struct LoadSquaredDifference {
  const float* a;
  const float* b;
  __device__ float operator()(int64_t i) const {
    const float d = a[i] - b[i];
    return d * d;
  }
};
struct LoadSquare {
  const float* x;
  __device__ float operator()(int64_t i) const { return x[i] * x[i]; }
};
struct LoadMagnitude {
  const float* x;
  __device__ float operator()(int64_t i) const { return fabsf(x[i]); }
};
struct LoadMagnitudePower {
  const float* x;
  float ord;
  __device__ float operator()(int64_t i) const { return powf(fabsf(x[i]), ord); }
};

// What the last pass writes.
struct Keep {
  __device__ float operator()(float v) const { return v; }
};
struct Scale {
  float scale;
  __device__ float operator()(float v) const { return scale * v; }
};
struct SquareRoot {
  __device__ float operator()(float v) const { return sqrtf(v); }
};
struct Root {
  float inverse_ord;
  __device__ float operator()(float v) const { return powf(v, inverse_ord); }
};

// dst[blockIdx.x] = finish(load(i) combined over the indices this block visits)
template <typename Load, typename Combine, typename Finish>
__device__ void block_reduce_kernel(int64_t n, Load load, Combine combine, Finish finish, float* dst) {
  float v = 0.0f;
  for (int64_t i = global_thread(); i < n; i += grid_threads()) v = combine(v, load(i));
  v = block_reduce(v, combine);
  if (threadIdx.x == 0) dst[blockIdx.x] = finish(v);
}

// The blocks of a reduction's first pass; 0 when one block of kSinglePassThreads does the whole reduction (Note
// [Deterministic reductions] in reductions.h).
int reduce_blocks(int64_t n) {
  if (n <= kSinglePassElements) return 0;
  return static_cast<int>(
      std::clamp<int64_t>((n + kThreads * kReducePerThread - 1) / (kThreads * kReducePerThread), 1, kMaxReduceBlocks));
}

// See Note [Deterministic reductions].
template <typename Load, typename Combine, typename Finish>
void launch_reduce(int64_t n, Load load, Combine combine, Finish finish, float* out, float* scratch,
                   cudaStream_t stream) {
  const int blocks = reduce_blocks(n);
  if (blocks == 0) {
    launch<block_reduce_kernel<Load, Combine, Finish>>(1, kSinglePassThreads, stream, n, load, combine, finish, out);
    return;
  }
  TANDEM_INTERNAL_ASSERT(scratch != nullptr, "cuda kernels: a reduction over ", n,
                         " elements needs a scratch buffer of reduce_scratch_floats(n) floats");
  launch<block_reduce_kernel<Load, Combine, Keep>>(blocks, kThreads, stream, n, load, combine, Keep{}, scratch);
  launch<block_reduce_kernel<LoadValue, Combine, Finish>>(1, kThreads, stream, int64_t{blocks}, LoadValue{scratch},
                                                          combine, finish, out);
}

template <typename Load>
void launch_sum(int64_t n, Load load, float scale, float* out, float* scratch, cudaStream_t stream) {
  launch_reduce(n, load, Add{}, Scale{scale}, out, scratch, stream);
}

// ---- sums along one dimension ------------------------------------------------------------------------------

// inner == 1, short rows: one warp per row.
__device__ void sum_rows_warp_kernel(const float* x, float* out, int64_t rows, int64_t len) {
  const int lane = threadIdx.x % 32;
  const int64_t warps = grid_threads() / 32;
  for (int64_t row = global_thread() / 32; row < rows; row += warps) {  // uniform within a warp
    float v = 0.0f;
    for (int64_t j = lane; j < len; j += 32) v += x[row * len + j];
    v = warp_sum(v);
    if (lane == 0) out[row] = v;
  }
}

// inner == 1, long rows: one block per row, each thread keeping four partial sums (four loads in flight).
__device__ void sum_rows_block_kernel(const float* x, float* out, int64_t rows, int64_t len) {
  const int64_t stride = blockDim.x;
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {  // uniform within the block
    const float* values = x + row * len;
    float v0 = 0.0f, v1 = 0.0f, v2 = 0.0f, v3 = 0.0f;
    int64_t j = threadIdx.x;
    for (; j + 3 * stride < len; j += 4 * stride) {
      v0 += values[j];
      v1 += values[j + stride];
      v2 += values[j + 2 * stride];
      v3 += values[j + 3 * stride];
    }
    for (; j < len; j += stride) v0 += values[j];
    const float v = block_sum((v0 + v1) + (v2 + v3));
    if (threadIdx.x == 0) out[row] = v;
  }
}

// inner > 1: the threads along x of a block read neighbouring columns (coalesced); the blockDim.y threads of one
// column each sum a strided share of the reduced dim, and the first of them adds the shares in a fixed order.
__device__ void sum_columns_kernel(const float* x, float* out, int64_t outer, int64_t reduce, int64_t inner) {
  __shared__ float shares[kThreads];
  const int64_t col = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  for (int64_t o = blockIdx.y; o < outer; o += gridDim.y) {  // uniform within the block
    float v = 0.0f;
    if (col < inner) {
      const float* column = x + o * reduce * inner + col;
      for (int64_t r = threadIdx.y; r < reduce; r += blockDim.y) v += column[r * inner];
    }
    shares[threadIdx.y * blockDim.x + threadIdx.x] = v;
    __syncthreads();
    if (threadIdx.y == 0 && col < inner) {
      float total = 0.0f;
      for (unsigned j = 0; j < blockDim.y; ++j) total += shares[j * blockDim.x + threadIdx.x];
      out[o * inner + col] = total;
    }
    __syncthreads();
  }
}

// ---- reductions along one dimension ---------------------------------------------------------------------------

// best combined over the warp's lanes (Extreme's rule: NaN first, then the lower index); valid in lane 0.
template <bool kMax>
__device__ void warp_best(backend::Extreme<kMax>& best) {
  for (int offset = 16; offset > 0; offset /= 2)
    best.offer(__shfl_down_sync(0xffffffffu, best.value, offset), __shfl_down_sync(0xffffffffu, best.index, offset));
}

// The extreme of row `row` of `reduce` contiguous elements, combined over the calling warp; valid in lane 0.
template <bool kMax>
__device__ backend::Extreme<kMax> warp_extreme_of_row(const float* x, int64_t row, int64_t reduce) {
  const float* p = x + row * reduce;
  backend::Extreme<kMax> best{p[0], 0};
  for (int64_t r = threadIdx.x % 32; r < reduce; r += 32) best.offer(p[r], r);
  warp_best(best);
  return best;
}

// The extreme of output i's column of `reduce` elements, `inner` apart, by this thread alone.
template <bool kMax>
__device__ backend::Extreme<kMax> extreme_of_column(const float* x, int64_t i, int64_t reduce, int64_t inner) {
  const float* p = x + (i / inner) * reduce * inner + i % inner;
  backend::Extreme<kMax> best{p[0], 0};
  for (int64_t r = 1; r < reduce; ++r) best.offer(p[r * inner], r);
  return best;
}

// One warp per row of `reduce` contiguous elements (inner == 1).
template <bool kMax>
__device__ void extreme_rows_kernel(const float* x, int64_t rows, int64_t reduce, float* values, int64_t* indices) {
  for (int64_t row = global_thread() / 32; row < rows; row += grid_threads() / 32) {
    const backend::Extreme<kMax> best = warp_extreme_of_row<kMax>(x, row, reduce);
    if (threadIdx.x % 32 == 0) {
      values[row] = best.value;
      if (indices != nullptr) indices[row] = best.index;
    }
  }
}

// One thread per output of [outer, inner]; neighbouring threads read neighbouring columns.
template <bool kMax>
__device__ void extreme_columns_kernel(const float* x, int64_t outer, int64_t reduce, int64_t inner, float* values,
                                       int64_t* indices) {
  for (int64_t i = global_thread(); i < outer * inner; i += grid_threads()) {
    const backend::Extreme<kMax> best = extreme_of_column<kMax>(x, i, reduce, inner);
    values[i] = best.value;
    if (indices != nullptr) indices[i] = best.index;
  }
}

__device__ float log_sum_exp_finish(float m, float total) { return isfinite(m) ? m + logf(total) : m; }

__device__ void log_sum_exp_rows_kernel(const float* x, int64_t rows, int64_t reduce, float* values) {
  const int lane = threadIdx.x % 32;
  for (int64_t row = global_thread() / 32; row < rows; row += grid_threads() / 32) {
    const float* p = x + row * reduce;
    const float m = __shfl_sync(0xffffffffu, warp_extreme_of_row<true>(x, row, reduce).value, 0);
    float total = 0.0f;
    if (isfinite(m))
      for (int64_t r = lane; r < reduce; r += 32) total += expf(p[r] - m);
    total = warp_sum(total);
    if (lane == 0) values[row] = log_sum_exp_finish(m, total);
  }
}

__device__ void log_sum_exp_columns_kernel(const float* x, int64_t outer, int64_t reduce, int64_t inner,
                                           float* values) {
  for (int64_t i = global_thread(); i < outer * inner; i += grid_threads()) {
    const float* p = x + (i / inner) * reduce * inner + i % inner;
    const float m = extreme_of_column<true>(x, i, reduce, inner).value;
    float total = 0.0f;
    if (isfinite(m))
      for (int64_t r = 0; r < reduce; ++r) total += expf(p[r * inner] - m);
    values[i] = log_sum_exp_finish(m, total);
  }
}

}  // namespace

void sum_dim(const float* x, float* out, int64_t outer, int64_t reduce, int64_t inner, cudaStream_t stream) {
  if (outer == 0 || inner == 0) return;
  if (inner == 1) {
    if (reduce <= kThreads) {
      launch<sum_rows_warp_kernel>(blocks_for(outer * 32), kThreads, stream, x, out, outer, reduce);
    } else {
      // Few rows (a convolution's bias gradient: one per channel, each over every image and position) take the
      // largest blocks, so that the few blocks still keep enough loads in flight.
      const int blocks = static_cast<int>(std::min(outer, kMaxBlocks));
      const int threads = outer < kFewRows ? kSinglePassThreads : kThreads;
      launch<sum_rows_block_kernel>(blocks, threads, stream, x, out, outer, reduce);
    }
  } else {
    int64_t columns_per_block = 2;
    while (columns_per_block < 32 && columns_per_block < inner) columns_per_block *= 2;
    // Narrower blocks where 32 columns each would leave most SMs idle (a layer norm's [chunks, cols] partial sums:
    // one outer row of a few hundred columns), down to 4 neighbouring columns (16 bytes of each row) per block.
    const auto blocks_of = [&](int64_t columns) {
      return (inner + columns - 1) / columns * std::min<int64_t>(outer, 65535);
    };
    while (columns_per_block > 4 && blocks_of(columns_per_block) < kFewRows) columns_per_block /= 2;
    const dim3 block(static_cast<unsigned>(columns_per_block), static_cast<unsigned>(kThreads / columns_per_block));
    const dim3 grid(static_cast<unsigned>((inner + columns_per_block - 1) / columns_per_block),
                    static_cast<unsigned>(std::min<int64_t>(outer, 65535)));
    launch<sum_columns_kernel>(grid, block, stream, x, out, outer, reduce, inner);
  }
}

int64_t reduce_scratch_floats(int64_t n) { return reduce_blocks(n); }

void sum_all(const float* x, int64_t n, float scale, float* out, float* scratch, cudaStream_t stream) {
  launch_sum(n, LoadValue{x}, scale, out, scratch, stream);
}

void mse_forward(const float* input, const float* target, int64_t n, float* out, float* scratch, cudaStream_t stream) {
  const float inverse_n = n > 0 ? static_cast<float>(1.0 / n) : std::numeric_limits<float>::quiet_NaN();
  launch_sum(n, LoadSquaredDifference{input, target}, inverse_n, out, scratch, stream);
}

void vector_norm(const float* x, int64_t n, double ord, float* out, float* scratch, cudaStream_t stream) {
  if (std::isinf(ord)) {
    launch_reduce(n, LoadMagnitude{x}, MaxKeepingNan{}, Keep{}, out, scratch, stream);
  } else if (ord == 2.0) {
    launch_reduce(n, LoadSquare{x}, Add{}, SquareRoot{}, out, scratch, stream);
  } else if (ord == 1.0) {
    launch_reduce(n, LoadMagnitude{x}, Add{}, Keep{}, out, scratch, stream);
  } else {
    launch_reduce(n, LoadMagnitudePower{x, static_cast<float>(ord)}, Add{}, Root{static_cast<float>(1.0 / ord)}, out,
                  scratch, stream);
  }
}

void reduce_dim(backend::ReduceOp op, const float* x, int64_t outer, int64_t reduce, int64_t inner, float* values,
                int64_t* indices, cudaStream_t stream) {
  if (outer == 0 || inner == 0) return;
  const bool rows = inner == 1;
  const int row_blocks = blocks_for(outer * 32);
  const int column_blocks = blocks_for(outer * inner);
  switch (op) {
    case backend::ReduceOp::Max:
      if (rows) {
        launch<extreme_rows_kernel<true>>(row_blocks, kThreads, stream, x, outer, reduce, values, indices);
      } else {
        launch<extreme_columns_kernel<true>>(column_blocks, kThreads, stream, x, outer, reduce, inner, values, indices);
      }
      break;
    case backend::ReduceOp::Min:
      if (rows) {
        launch<extreme_rows_kernel<false>>(row_blocks, kThreads, stream, x, outer, reduce, values, indices);
      } else {
        launch<extreme_columns_kernel<false>>(column_blocks, kThreads, stream, x, outer, reduce, inner, values,
                                              indices);
      }
      break;
    case backend::ReduceOp::LogSumExp:
      if (rows) {
        launch<log_sum_exp_rows_kernel>(row_blocks, kThreads, stream, x, outer, reduce, values);
      } else {
        launch<log_sum_exp_columns_kernel>(column_blocks, kThreads, stream, x, outer, reduce, inner, values);
      }
      break;
  }
}

}  // namespace tandem::cuda::kernels
