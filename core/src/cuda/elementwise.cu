// The CUDA backend's general kernels: one generic elementwise kernel (contiguous and strided forms) instantiated for
// each pointwise functor of kernel_ops.h, reductions along one dimension (a warp per row when the reduced dimension
// is innermost, a thread per output otherwise), and gather / scatter-add along a dimension.

#include "cuda/elementwise.h"
#include "cuda/launch.cuh"
#include "cuda/strided_index.cuh"
#include "cuda/warp_reduce.cuh"

namespace tandem::cuda::kernels {
namespace {

struct Inputs {
  const float* p[kMaxOperands - 1];
};

template <int kArity, typename F>
__device__ float apply(const F& f, const Inputs& in, const int64_t* at) {
  if constexpr (kArity == 1) {
    return f(in.p[0][at[0]]);
  } else if constexpr (kArity == 2) {
    return f(in.p[0][at[0]], in.p[1][at[1]]);
  } else {
    return f(in.p[0][at[0]], in.p[1][at[1]], in.p[2][at[2]]);
  }
}

template <int kArity, typename F>
__device__ void contiguous_kernel(int64_t n, float* out, Inputs in, F f) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const int64_t at[3] = {i, i, i};
    out[i] = apply<kArity>(f, in, at);
  }
}

template <int kArity, typename F>
__device__ void strided_kernel(int64_t n, Strided s, float* out, Inputs in, F f) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    int64_t offset[kMaxOperands];
    strided_offsets<kArity + 1>(i, s, offset);
    out[offset[0]] = apply<kArity>(f, in, offset + 1);
  }
}

template <int kArity, typename F>
void launch_pointwise(F f, const float* const* inputs, float* out, const Strided& s, cudaStream_t stream) {
  const int64_t n = elements_of(s);
  if (n == 0) return;
  Inputs in{};
  for (int k = 0; k < kArity; ++k) in.p[k] = inputs[k];
  if (all_contiguous(s, kArity + 1)) {
    launch<contiguous_kernel<kArity, F>>(blocks_for(n), kThreads, stream, n, out, in, f);
  } else {
    launch<strided_kernel<kArity, F>>(blocks_for(n), kThreads, stream, n, s, out, in, f);
  }
}

// ---- reductions along one dimension ---------------------------------------------------------------------------

// As the CPU backend: NaN beats every number, and among equal values (or NaNs) the lower index wins.
template <bool kMax>
__device__ bool beats(float v, int64_t i, float best, int64_t best_i) {
  if (isnan(v)) return !isnan(best) || i < best_i;
  if (isnan(best)) return false;
  if (kMax ? v > best : v < best) return true;
  return v == best && i < best_i;
}

template <bool kMax>
__device__ void warp_best(float& best, int64_t& best_i) {
  for (int offset = 16; offset > 0; offset /= 2) {
    const float v = __shfl_down_sync(0xffffffffu, best, offset);
    const int64_t i = __shfl_down_sync(0xffffffffu, best_i, offset);
    if (beats<kMax>(v, i, best, best_i)) {
      best = v;
      best_i = i;
    }
  }
}

// One warp per row of `reduce` contiguous elements (inner == 1).
template <bool kMax>
__device__ void extreme_rows_kernel(const float* x, int64_t rows, int64_t reduce, float* values, float* indices) {
  const int lane = threadIdx.x % 32;
  for (int64_t row = global_thread() / 32; row < rows; row += grid_threads() / 32) {
    const float* p = x + row * reduce;
    float best = p[0];
    int64_t best_i = 0;
    for (int64_t r = lane; r < reduce; r += 32)
      if (beats<kMax>(p[r], r, best, best_i)) {
        best = p[r];
        best_i = r;
      }
    warp_best<kMax>(best, best_i);
    if (lane == 0) {
      values[row] = best;
      if (indices != nullptr) indices[row] = static_cast<float>(best_i);
    }
  }
}

// One thread per output of [outer, inner]; neighbouring threads read neighbouring columns.
template <bool kMax>
__device__ void extreme_columns_kernel(const float* x, int64_t outer, int64_t reduce, int64_t inner, float* values,
                                       float* indices) {
  for (int64_t i = global_thread(); i < outer * inner; i += grid_threads()) {
    const float* p = x + (i / inner) * reduce * inner + i % inner;
    float best = p[0];
    int64_t best_i = 0;
    for (int64_t r = 1; r < reduce; ++r)
      if (beats<kMax>(p[r * inner], r, best, best_i)) {
        best = p[r * inner];
        best_i = r;
      }
    values[i] = best;
    if (indices != nullptr) indices[i] = static_cast<float>(best_i);
  }
}

__device__ float log_sum_exp_finish(float m, float total) { return isfinite(m) ? m + logf(total) : m; }

__device__ void log_sum_exp_rows_kernel(const float* x, int64_t rows, int64_t reduce, float* values) {
  const int lane = threadIdx.x % 32;
  for (int64_t row = global_thread() / 32; row < rows; row += grid_threads() / 32) {
    const float* p = x + row * reduce;
    float m = p[0];
    int64_t unused = 0;
    for (int64_t r = lane; r < reduce; r += 32)
      if (beats<true>(p[r], 0, m, 0)) m = p[r];
    warp_best<true>(m, unused);
    m = __shfl_sync(0xffffffffu, m, 0);
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
    float m = p[0];
    for (int64_t r = 1; r < reduce; ++r)
      if (beats<true>(p[r * inner], 0, m, 0)) m = p[r * inner];
    float total = 0.0f;
    if (isfinite(m))
      for (int64_t r = 0; r < reduce; ++r) total += expf(p[r * inner] - m);
    values[i] = log_sum_exp_finish(m, total);
  }
}

// ---- gather / scatter-add ---------------------------------------------------------------------------------------

__device__ void gather_kernel(int64_t n, Strided s, const float* x, int64_t dim_stride, const float* index,
                              float* out) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    int64_t offset[kMaxOperands];
    strided_offsets<3>(i, s, offset);
    out[offset[0]] = x[offset[2] + static_cast<int64_t>(index[offset[1]]) * dim_stride];
  }
}

__device__ void scatter_add_kernel(int64_t n, Strided s, const float* src, int64_t dim_stride, const float* index,
                                   float* target) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    int64_t offset[kMaxOperands];
    strided_offsets<3>(i, s, offset);
    atomicAdd(target + offset[2] + static_cast<int64_t>(index[offset[1]]) * dim_stride, src[offset[0]]);
  }
}

}  // namespace

void pointwise(const backend::PointwiseCall& call, const float* const* inputs, float* out, const Strided& layout,
               cudaStream_t stream) {
  backend::visit_pointwise(call, [&](auto f) {
    launch_pointwise<decltype(f)::kArity>(f, inputs, out, layout, stream);
  });
}

void reduce_dim(backend::ReduceOp op, const float* x, int64_t outer, int64_t reduce, int64_t inner, float* values,
                float* indices, cudaStream_t stream) {
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

void gather(const float* x, int64_t dim_stride, const float* index, float* out, const Strided& layout,
            cudaStream_t stream) {
  const int64_t n = elements_of(layout);
  if (n == 0) return;
  launch<gather_kernel>(blocks_for(n), kThreads, stream, n, layout, x, dim_stride, index, out);
}

void scatter_add(const float* src, int64_t dim_stride, const float* index, float* target, const Strided& layout,
                 cudaStream_t stream) {
  const int64_t n = elements_of(layout);
  if (n == 0) return;
  launch<scatter_add_kernel>(blocks_for(n), kThreads, stream, n, layout, src, dim_stride, index, target);
}

}  // namespace tandem::cuda::kernels
