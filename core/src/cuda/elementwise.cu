// The CUDA backend's elementwise kernels: one elementwise engine (Note [One elementwise engine]) that runs every
// pointwise functor of kernel_ops.h and the fills, copies and device-scalar functions below; tiled transposing copies;
// the masks of tril and triu; gather / scatter-add along a dimension. See elementwise.h for the contracts.

#include "cuda/elementwise.h"

#include <algorithm>

#include "cuda/launch.cuh"
#include "cuda/strided_index.cuh"

namespace tandem::cuda::kernels {
namespace {

// Note [One elementwise engine]: out = f(inputs...) for a functor f with a static kArity of 0 to 3 (the pointwise
// functors of kernel_ops.h and the few functions of this file that read device memory), launched by layout:
// - contiguous (every operand one dim of stride 1): a float4 per input and output and per thread where every pointer
//   is 16-byte aligned, the last n % 4 elements one at a time; else one element at a time;
// - row broadcast (two dims, the output and each input contiguous or one row repeated over the rows: a bias);
// - anything else through strided_offsets (in 32-bit arithmetic where every index and offset fits), four elements
//   per thread as float4s where the last dim runs in packs of four in every operand (packs_of_4: views such as
//   attention heads) and every pointer is 16-byte aligned.
// f runs once per element on the element's own inputs in every form, so the form changes the speed, never a value.
// out may be an input's memory with out's strides (in place): each element is read before it is written, by the
// thread that writes it.

// The inputs; only the first F::kArity are read.
struct Inputs {
  const float* p[kMaxOperands - 1];
};

// f of the values load(0), ..., load(F::kArity - 1).
template <typename F, typename Load>
__device__ float apply(const F& f, const Load& load) {
  if constexpr (F::kArity == 0) {
    return f();
  } else if constexpr (F::kArity == 1) {
    return f(load(0));
  } else if constexpr (F::kArity == 2) {
    return f(load(0), load(1));
  } else {
    return f(load(0), load(1), load(2));
  }
}

// f of four elements at once: element c of the result from component c of every input's float4.
template <typename F>
__device__ float4 apply4(const F& f, const float4 (&v)[kMaxOperands - 1]) {
  return make_float4(apply(f, [&](int k) { return v[k].x; }), apply(f, [&](int k) { return v[k].y; }),
                     apply(f, [&](int k) { return v[k].z; }), apply(f, [&](int k) { return v[k].w; }));
}

template <typename F>
__device__ void contiguous_kernel(int64_t n, float* out, Inputs in, F f) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) out[i] = apply(f, [&](int k) { return in.p[k][i]; });
}

// Every pointer used is 16-byte aligned: whole float4s, then the last n % 4 elements by the first threads.
template <typename F>
__device__ void contiguous_vec4_kernel(int64_t n, float* out, Inputs in, F f) {
  const int64_t n4 = n / 4;
  for (int64_t i = global_thread(); i < n4; i += grid_threads()) {
    float4 v[kMaxOperands - 1];
#pragma unroll
    for (int k = 0; k < F::kArity; ++k) v[k] = reinterpret_cast<const float4*>(in.p[k])[i];
    reinterpret_cast<float4*>(out)[i] = apply4(f, v);
  }
  const int64_t tail = n4 * 4 + global_thread();
  if (tail < n) out[tail] = apply(f, [&](int k) { return in.p[k][tail]; });
}

// out is [n / cols, cols] contiguous; input k is the same, or, where bit k of `rows` is set, one row repeated over
// dim 0 (a bias).
template <typename F>
__device__ void row_broadcast_kernel(int64_t n, int64_t cols, float* out, Inputs in, unsigned rows, F f) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const int64_t col = i % cols;
    out[i] = apply(f, [&](int k) { return in.p[k][(rows >> k) & 1u ? col : i]; });
  }
}

template <typename F, typename Index>
__device__ void strided_kernel(int64_t n, Strided s, float* out, Inputs in, F f) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    int64_t offset[kMaxOperands];
    strided_offsets<F::kArity + 1, Index>(i, s, offset);
    out[offset[0]] = apply(f, [&](int k) { return in.p[k][offset[k + 1]]; });
  }
}

// packs_of_4(s, F::kArity + 1) and every pointer 16-byte aligned: a float4 per operand and thread at the offsets of
// flat index 4 j.
template <typename F, typename Index>
__device__ void strided_vec4_kernel(int64_t n, Strided s, float* out, Inputs in, F f) {
  for (int64_t j = global_thread(); j < n / 4; j += grid_threads()) {
    int64_t offset[kMaxOperands];
    strided_offsets<F::kArity + 1, Index>(4 * j, s, offset);
    float4 v[kMaxOperands - 1];
#pragma unroll
    for (int k = 0; k < F::kArity; ++k) v[k] = *reinterpret_cast<const float4*>(in.p[k] + offset[k + 1]);
    *reinterpret_cast<float4*>(out + offset[0]) = apply4(f, v);
  }
}

template <typename F>
void launch_contiguous(F f, const Inputs& in, float* out, int64_t n, cudaStream_t stream) {
  if (n == 0) return;
  bool vec4 = n >= 4 && aligned16(out);
  for (int k = 0; k < F::kArity; ++k) vec4 = vec4 && aligned16(in.p[k]);
  if (vec4) {
    launch<contiguous_vec4_kernel<F>>(blocks_for(n / 4), kThreads, stream, n, out, in, f);
  } else {
    launch<contiguous_kernel<F>>(blocks_for(n), kThreads, stream, n, out, in, f);
  }
}

bool is_full_2d(const Strided& s, int k) { return s.strides[k][0] == s.sizes[1] && s.strides[k][1] == 1; }
bool is_row_2d(const Strided& s, int k) { return s.strides[k][0] == 0 && s.strides[k][1] == 1; }

// Two dims, the output contiguous, every input either contiguous too or one row broadcast over the rows.
bool is_row_broadcast(const Strided& s, int operands) {
  if (s.ndim != 2 || !is_full_2d(s, 0)) return false;
  for (int k = 1; k < operands; ++k)
    if (!is_full_2d(s, k) && !is_row_2d(s, k)) return false;
  return true;
}

// Whether strided_vec4_kernel can run s for a functor of `arity` inputs.
bool strided_vec4(int arity, const Inputs& in, const float* out, const Strided& s) {
  bool vec4 = packs_of_4(s, arity + 1) && aligned16(out);
  for (int k = 0; k < arity; ++k) vec4 = vec4 && aligned16(in.p[k]);
  return vec4;
}

// See Note [One elementwise engine].
template <typename F>
void launch_elementwise(F f, const Inputs& in, float* out, const Strided& s, cudaStream_t stream) {
  const int64_t n = elements_of(s);
  if (n == 0) return;
  constexpr int kOperands = F::kArity + 1;
  if (all_contiguous(s, kOperands)) {
    launch_contiguous(f, in, out, n, stream);
  } else if (is_row_broadcast(s, kOperands)) {
    unsigned rows = 0;
    for (int k = 0; k < F::kArity; ++k)
      if (is_row_2d(s, k + 1)) rows |= 1u << k;
    launch<row_broadcast_kernel<F>>(blocks_for(n), kThreads, stream, n, s.sizes[1], out, in, rows, f);
  } else if (strided_vec4(F::kArity, in, out, s) && fits_32_bits(s, kOperands)) {
    launch<strided_vec4_kernel<F, uint32_t>>(blocks_for(n / 4), kThreads, stream, n, s, out, in, f);
  } else if (fits_32_bits(s, kOperands)) {
    launch<strided_kernel<F, uint32_t>>(blocks_for(n), kThreads, stream, n, s, out, in, f);
  } else {
    launch<strided_kernel<F, int64_t>>(blocks_for(n), kThreads, stream, n, s, out, in, f);
  }
}

// ---- functions outside the pointwise table ----------------------------------------------------------------------

struct FillOp {
  static constexpr int kArity = 0;
  float value;
  __device__ float operator()() const { return value; }
};
struct CopyOp {
  static constexpr int kArity = 1;
  __device__ float operator()(float a) const { return a; }
};
struct ScaledScalarOp {  // the scalar stays in device memory: no host round trip
  static constexpr int kArity = 0;
  const float* scalar;
  float scale;
  __device__ float operator()() const { return scale * *scalar; }
};
// The factor 2 * grad / n is formed in double, like on the CPU; Note [Rounding like the CPU] in kernel_ops.h.
struct MseBackwardOp {
  static constexpr int kArity = 2;
  const float* grad;
  double n;
  __device__ float operator()(float x, float t) const {
    const float factor = __double2float_rn(2.0 * static_cast<double>(*grad) / n);
    return __fmul_rn(factor, __fsub_rn(x, t));
  }
};
struct ClipByNormOp {  // the norm stays in device memory: no host round trip
  static constexpr int kArity = 1;
  const float* norm;
  float max_norm;
  __device__ float operator()(float x) const {
    // As the CPU backend (and PyTorch) evaluate max_norm / (norm + 1e-6), then clamp it to at most 1.
    float factor = __fmul_rn(__fdiv_rn(1.0f, __fadd_rn(*norm, 1e-6f)), max_norm);
    if (factor > 1.0f) factor = 1.0f;  // NaN stays NaN
    return __fmul_rn(x, factor);
  }
};

// ---- transposing copies -----------------------------------------------------------------------------------------

// Note [Transposing copies]: a copy from a transposed view into a row-major matrix (contiguous() of a transpose, or
// the operand copy of Note [TF32 operands along k] in gemm.cpp), one thread per output element, reads the source a
// column at a time: the 32 loads of a warp fall in 32 different sectors. Through a shared-memory tile instead, a warp
// reads 32 consecutive source elements and writes 32 consecutive output elements; the tile's extra column keeps the
// column reads of the second phase on 32 different banks. The row sums that a weight gradient's bias gradient needs
// come out of the same pass: each thread adds the values it loads, and one row of threads adds those partial sums
// per tile row, in a fixed order.
constexpr int kTile = kTransposeTile;
constexpr int kTileRows = 8;  // blockDim = (kTile, kTileRows): each thread moves kTile / kTileRows elements per tile

// Two dims, the output row-major and the source its transpose's layout (unit row stride, column stride at least the
// row count: nothing collapsed them into one).
bool is_transposing_copy(const Strided& s) {
  return s.ndim == 2 && is_full_2d(s, 0) && s.strides[1][0] == 1 && s.strides[1][1] >= s.sizes[0];
}

// See transpose() in elementwise.h. Blocks walk the tiles, column of tiles by column of tiles.
__device__ void transpose_kernel(int64_t rows, int64_t cols, int64_t in_col_stride, const float* in, float* out,
                                 float* tile_row_sums) {
  __shared__ float tile[kTile][kTile + 1];
  __shared__ float partial_sums[kTileRows][kTile];
  const int64_t row_tiles = (rows + kTile - 1) / kTile;
  const int64_t tiles = row_tiles * ((cols + kTile - 1) / kTile);
  for (int64_t t = blockIdx.x; t < tiles; t += gridDim.x) {
    const int64_t row0 = (t % row_tiles) * kTile;
    const int64_t col0 = (t / row_tiles) * kTile;
    const int64_t r = row0 + threadIdx.x;
    float partial = 0.0f;
    for (int j = threadIdx.y; j < kTile; j += kTileRows) {
      const int64_t c = col0 + j;
      if (r < rows && c < cols) {
        const float value = in[r + c * in_col_stride];
        tile[j][threadIdx.x] = value;
        partial += value;
      }
    }
    if (tile_row_sums != nullptr) partial_sums[threadIdx.y][threadIdx.x] = partial;
    __syncthreads();
    if (tile_row_sums != nullptr && threadIdx.y == 0 && r < rows) {
      float sum = 0.0f;
      for (int k = 0; k < kTileRows; ++k) sum += partial_sums[k][threadIdx.x];
      tile_row_sums[(t / row_tiles) * rows + r] = sum;
    }
    const int64_t c = col0 + threadIdx.x;
    for (int j = threadIdx.y; j < kTile; j += kTileRows) {
      const int64_t row = row0 + j;
      if (row < rows && c < cols) out[row * cols + c] = tile[threadIdx.x][j];
    }
    __syncthreads();  // the tile and the partial sums are read before the next tile's are written
  }
}

// ---- triangle masks ------------------------------------------------------------------------------------------------

__device__ void triangle_mask_kernel(int64_t rows, int64_t cols, int64_t diagonal, bool lower, float* out) {
  for (int64_t i = global_thread(); i < rows * cols; i += grid_threads())
    out[i] = backend::in_triangle(i / cols, i % cols, diagonal, lower) ? 1.0f : 0.0f;
}

// ---- gather / scatter-add ---------------------------------------------------------------------------------------

__device__ void gather_kernel(int64_t n, Strided s, const float* x, int64_t dim_size, int64_t dim_stride,
                              const int64_t* index, float* out) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    int64_t offset[kMaxOperands];
    strided_offsets<3>(i, s, offset);
    const int64_t at = index[offset[1]];
    out[offset[0]] = at >= 0 && at < dim_size ? x[offset[2] + at * dim_stride] : __int_as_float(0x7fc00000);
  }
}

__device__ void scatter_add_kernel(int64_t n, Strided s, const float* src, int64_t dim_size, int64_t dim_stride,
                                   const int64_t* index, float* target) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    int64_t offset[kMaxOperands];
    strided_offsets<3>(i, s, offset);
    const int64_t at = index[offset[1]];
    if (at >= 0 && at < dim_size) atomicAdd(target + offset[2] + at * dim_stride, src[offset[0]]);
  }
}

}  // namespace

void pointwise(const backend::PointwiseCall& call, const float* const* inputs, float* out, const Strided& layout,
               cudaStream_t stream) {
  backend::visit_pointwise(call, [&](auto f) {
    Inputs in{};
    for (int k = 0; k < decltype(f)::kArity; ++k) in.p[k] = inputs[k];
    launch_elementwise(f, in, out, layout, stream);
  });
}

void fill(float* out, const Strided& layout, float value, cudaStream_t stream) {
  launch_elementwise(FillOp{value}, Inputs{}, out, layout, stream);
}

void transpose(const float* in, int64_t rows, int64_t cols, int64_t in_col_stride, float* out, float* tile_row_sums,
               cudaStream_t stream) {
  if (rows == 0 || cols == 0) return;
  const int64_t tiles = transpose_tiles(rows) * transpose_tiles(cols);
  launch<transpose_kernel>(static_cast<unsigned>(std::min(tiles, kMaxBlocks)), dim3(kTile, kTileRows), stream, rows,
                           cols, in_col_stride, in, out, tile_row_sums);
}

void copy(const float* src, float* dst, const Strided& layout, cudaStream_t stream) {
  if (is_transposing_copy(layout)) {
    transpose(src, layout.sizes[0], layout.sizes[1], layout.strides[1][1], dst, nullptr, stream);
    return;
  }
  launch_elementwise(CopyOp{}, Inputs{{src}}, dst, layout, stream);
}

void triangle_mask(int64_t rows, int64_t cols, int64_t diagonal, bool lower, float* out, cudaStream_t stream) {
  const int64_t n = rows * cols;
  if (n == 0) return;
  launch<triangle_mask_kernel>(blocks_for(n), kThreads, stream, rows, cols, diagonal, lower, out);
}

void broadcast_scalar(const float* scalar, float scale, float* out, int64_t n, cudaStream_t stream) {
  launch_contiguous(ScaledScalarOp{scalar, scale}, Inputs{}, out, n, stream);
}

void mse_backward(const float* grad, const float* input, const float* target, float* grad_input, int64_t n,
                  cudaStream_t stream) {
  launch_contiguous(MseBackwardOp{grad, static_cast<double>(n)}, Inputs{{input, target}}, grad_input, n, stream);
}

void clip_by_norm(float* x, int64_t n, const float* norm, float max_norm, cudaStream_t stream) {
  launch_contiguous(ClipByNormOp{norm, max_norm}, Inputs{{x}}, x, n, stream);
}

void gather(const float* x, int64_t dim_size, int64_t dim_stride, const int64_t* index, float* out,
            const Strided& layout, cudaStream_t stream) {
  const int64_t n = elements_of(layout);
  if (n == 0) return;
  launch<gather_kernel>(blocks_for(n), kThreads, stream, n, layout, x, dim_size, dim_stride, index, out);
}

void scatter_add(const float* src, int64_t dim_size, int64_t dim_stride, const int64_t* index, float* target,
                 const Strided& layout, cudaStream_t stream) {
  const int64_t n = elements_of(layout);
  if (n == 0) return;
  launch<scatter_add_kernel>(blocks_for(n), kThreads, stream, n, layout, src, dim_size, dim_stride, index,
                                 target);
}

}  // namespace tandem::cuda::kernels
