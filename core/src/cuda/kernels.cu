// The CUDA backend's own kernels: elementwise work (contiguous, row-broadcast and general strided forms),
// reductions and norms, products with a tiny output or a short k, the MSE loss and the fused SGD and Adam updates.
// See kernels.h for the contracts.

#include "cuda/kernels.h"
#include "cuda/launch.cuh"
#include "cuda/strided_index.cuh"
#include "cuda/warp_reduce.cuh"

#include <cuda_bf16.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>

#include "tandem/core/cuda/context.h"

namespace tandem::cuda::kernels {
namespace {

constexpr int64_t kMaxReduceBlocks = 1024;  // partial sums of the first reduction pass
constexpr int64_t kReducePerThread = 8;     // elements per thread before another block is worth it
// A reduction of up to kSinglePassElements elements takes one block of kSinglePassThreads threads (the most a block
// has, and what block_reduce's 32 warp slots hold), each looping over at most 64 elements: one launch, where two
// passes would take two (Note [Deterministic reductions] in kernels.h).
constexpr int kSinglePassThreads = 1024;
constexpr int64_t kSinglePassElements = int64_t{64} * kSinglePassThreads;

// Note [Rounding like the CPU]: nvcc contracts a * b + c into one fused multiply-add, which rounds once where the
// CPU backend rounds twice. Where a kernel computes such an expression and the CPU backend evaluates it the same
// way, it spells each rounding out (__fmul_rn and friends are never contracted), so that the same inputs give
// bitwise the same result on every device: the replicated training path applies the same SGD update on each
// replica and relies on replicas staying bit-equal, whatever their devices.

// ---- elementwise functors: out = f(a, b), where only the first kInputs of a, b are read ----------------------

struct FillOp {
  float value;
  __device__ float operator()(float, float) const { return value; }
};
struct CopyOp {
  __device__ float operator()(float a, float) const { return a; }
};
struct AddOp {
  __device__ float operator()(float a, float b) const { return a + b; }
};
struct SubOp {
  __device__ float operator()(float a, float b) const { return a - b; }
};
struct MulOp {
  __device__ float operator()(float a, float b) const { return a * b; }
};
struct AxpyOp {  // a = y, b = x
  float alpha;
  __device__ float operator()(float y, float x) const { return __fadd_rn(y, __fmul_rn(alpha, x)); }
};
struct ScaleOp {
  float s;
  __device__ float operator()(float x, float) const { return s * x; }
};
struct ReluOp {  // NaN stays NaN
  __device__ float operator()(float x, float) const { return x < 0.0f ? 0.0f : x; }
};
struct TanhOp {
  __device__ float operator()(float x, float) const { return tanhf(x); }
};
struct ReluBackwardOp {  // a = grad, b = input
  __device__ float operator()(float grad, float x) const { return x > 0.0f ? grad : 0.0f; }
};
struct TanhBackwardOp {  // a = grad, b = output
  __device__ float operator()(float grad, float y) const { return __fmul_rn(grad, __fsub_rn(1.0f, __fmul_rn(y, y))); }
};
struct ScaledScalarOp {  // the scalar stays in device memory: no host round trip
  const float* scalar;
  float scale;
  __device__ float operator()(float, float) const { return scale * *scalar; }
};
struct MseBackwardOp {  // a = input, b = target; the factor 2 * grad / n is formed in double, like on the CPU
  const float* grad;
  double n;
  __device__ float operator()(float x, float t) const {
    const float factor = __double2float_rn(2.0 * static_cast<double>(*grad) / n);
    return __fmul_rn(factor, __fsub_rn(x, t));
  }
};

// ---- elementwise kernels ------------------------------------------------------------------------------------

template <int kInputs>
__device__ float load_input(const float* p, int64_t i) {
  if constexpr (kInputs > 0) {
    return p[i];
  } else {
    return 0.0f;
  }
}

template <int kInputs, typename F>
__device__ void contiguous_kernel(int64_t n, float* out, const float* a, const float* b, F f) {
  for (int64_t i = global_thread(); i < n; i += grid_threads())
    out[i] = f(load_input<kInputs>(a, i), load_input<kInputs - 1>(b, i));
}

// Every pointer used is 16-byte aligned: whole float4s, then the last n % 4 elements by the first threads.
template <int kInputs, typename F>
__device__ void contiguous_vec4_kernel(int64_t n, float* out, const float* a, const float* b, F f) {
  const int64_t n4 = n / 4;
  for (int64_t i = global_thread(); i < n4; i += grid_threads()) {
    float4 va{}, vb{};
    if constexpr (kInputs >= 1) va = reinterpret_cast<const float4*>(a)[i];
    if constexpr (kInputs >= 2) vb = reinterpret_cast<const float4*>(b)[i];
    reinterpret_cast<float4*>(out)[i] = make_float4(f(va.x, vb.x), f(va.y, vb.y), f(va.z, vb.z), f(va.w, vb.w));
  }
  const int64_t tail = n4 * 4 + global_thread();
  if (tail < n) out[tail] = f(load_input<kInputs>(a, tail), load_input<kInputs - 1>(b, tail));
}

// out is [n / cols, cols] contiguous; each input is either the same or one row repeated over dim 0 (a bias).
template <int kInputs, typename F>
__device__ void row_broadcast_kernel(int64_t n, int64_t cols, float* out, const float* a, bool a_is_row,
                                     const float* b, bool b_is_row, F f) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    const int64_t col = i % cols;
    out[i] = f(load_input<kInputs>(a, a_is_row ? col : i), load_input<kInputs - 1>(b, b_is_row ? col : i));
  }
}

template <int kInputs, typename F>
__device__ void strided_kernel(int64_t n, Strided s, float* out, const float* a, const float* b, F f) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    int64_t offset[kMaxOperands];
    strided_offsets<kInputs + 1>(i, s, offset);
    out[offset[0]] = f(load_input<kInputs>(a, offset[1]), load_input<kInputs - 1>(b, offset[2]));
  }
}

__host__ __device__ bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <int kInputs, typename F>
void launch_contiguous(int64_t n, float* out, const float* a, const float* b, F f, cudaStream_t stream) {
  if (n == 0) return;
  const bool vec4 = n >= 4 && aligned16(out) && (kInputs < 1 || aligned16(a)) && (kInputs < 2 || aligned16(b));
  if (vec4) {
    launch<contiguous_vec4_kernel<kInputs, F>>(blocks_for(n / 4), kThreads, stream, n, out, a, b, f);
  } else {
    launch<contiguous_kernel<kInputs, F>>(blocks_for(n), kThreads, stream, n, out, a, b, f);
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

template <int kInputs, typename F>
void launch_elementwise(const Strided& s, float* out, const float* a, const float* b, F f, cudaStream_t stream) {
  const int64_t n = elements_of(s);
  if (n == 0) return;
  if (all_contiguous(s, kInputs + 1)) {
    launch_contiguous<kInputs>(n, out, a, b, f, stream);
    return;
  }
  if (is_row_broadcast(s, kInputs + 1)) {
    launch<row_broadcast_kernel<kInputs, F>>(blocks_for(n), kThreads, stream, n, s.sizes[1], out, a,
                                             is_row_2d(s, 1), b, is_row_2d(s, 2), f);
  } else {
    launch<strided_kernel<kInputs, F>>(blocks_for(n), kThreads, stream, n, s, out, a, b, f);
  }
}

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

// See transpose() in kernels.h. Blocks walk the tiles, column of tiles by column of tiles.
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

// ---- reductions ---------------------------------------------------------------------------------------------

// How partial results combine: Add (warp_reduce.cuh), or this; 0 is the identity of both (maxima are taken over
// magnitudes only).
struct MaxKeepingNan {
  __device__ float operator()(float a, float b) const { return a > b || isnan(a) ? a : b; }
};

// v combined over the block (blockDim.x a multiple of 32); the result is valid in thread 0. Every thread of the
// block must call it.
template <typename Combine>
__device__ float block_reduce(float v, Combine combine) {
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

__device__ float block_sum(float v) { return block_reduce(v, Add{}); }

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
// [Deterministic reductions] in kernels.h).
int reduce_blocks(int64_t n) {
  if (n <= kSinglePassElements) return 0;
  return static_cast<int>(std::clamp<int64_t>((n + kThreads * kReducePerThread - 1) / (kThreads * kReducePerThread),
                                              1, kMaxReduceBlocks));
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

// inner == 1, long rows: one block per row.
__device__ void sum_rows_block_kernel(const float* x, float* out, int64_t rows, int64_t len) {
  for (int64_t row = blockIdx.x; row < rows; row += gridDim.x) {  // uniform within the block
    float v = 0.0f;
    for (int64_t j = threadIdx.x; j < len; j += blockDim.x) v += x[row * len + j];
    v = block_sum(v);
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

// ---- small products (Note [Tiny products], Note [Short products] in kernels.h) --------------------------------

__device__ float widen(float x) { return x; }
__device__ float widen(__nv_bfloat16 x) { return __bfloat162float(x); }

// The blocks of a tiny product: one per output element and one per row sum.
int64_t tiny_product_blocks(const SmallProduct& p) { return p.m * p.n + (p.a_row_sums != nullptr ? p.m : 0); }

// Block 0 .. m * n - 1 of a tiny product: out[i][j] for i = block / n, j = block % n; blocks m * n .. m * n + m - 1:
// the row sums. Every thread of the block calls it.
template <typename T>
__device__ void tiny_product_block(const SmallProduct& p, int64_t block) {
  const T* a = static_cast<const T*>(p.a);
  const T* b = static_cast<const T*>(p.b);
  const int64_t products = p.m * p.n;
  const bool row_sum = block >= products;  // uniform within the block
  const int64_t i = row_sum ? block - products : block / p.n;
  const int64_t j = row_sum ? 0 : block % p.n;
  const T* a_row = a + i * p.a_row_stride;
  float v = 0.0f;
  if (row_sum) {
    for (int64_t q = threadIdx.x; q < p.k; q += blockDim.x) v += widen(a_row[q * p.a_col_stride]);
  } else {
    const T* b_column = b + j * p.b_col_stride;
    for (int64_t q = threadIdx.x; q < p.k; q += blockDim.x)
      v = fmaf(widen(a_row[q * p.a_col_stride]), widen(b_column[q * p.b_row_stride]), v);
  }
  v = block_sum(v);
  if (threadIdx.x != 0) return;
  if (row_sum) {
    p.a_row_sums[i] = v;
  } else {
    p.out[block] = p.accumulate ? p.out[block] + v : v;
  }
}

template <typename T>
__device__ void tiny_product_kernel(SmallProduct p) {
  tiny_product_block<T>(p, blockIdx.x);
}

// The elements first, first + threads, ... of a short product's out, element e being row e / n, column e % n;
// gemm.cpp keeps m * n and k within 32-bit indices.
template <typename T>
__device__ void short_product_elements(const SmallProduct& p, int first, int threads) {
  const T* a = static_cast<const T*>(p.a);
  const T* b = static_cast<const T*>(p.b);
  const int n = static_cast<int>(p.n);
  const int k = static_cast<int>(p.k);
  const int elements = static_cast<int>(p.m) * n;
  for (int e = first; e < elements; e += threads) {
    const int i = e / n;
    const int j = e - i * n;
    const T* a_row = a + i * p.a_row_stride;
    const T* b_column = b + j * p.b_col_stride;
    float v = 0.0f;
    for (int q = 0; q < k; ++q) v = fmaf(widen(a_row[q * p.a_col_stride]), widen(b_column[q * p.b_row_stride]), v);
    if (p.bias != nullptr) v += p.bias[j];
    if (p.accumulate) v += p.out[e];
    if (p.relu && v < 0.0f) v = 0.0f;  // NaN stays NaN
    p.out[e] = v;
  }
}

template <typename T>
__device__ void short_product_kernel(SmallProduct p) {
  short_product_elements<T>(p, static_cast<int>(global_thread()), static_cast<int>(grid_threads()));
}

// Note [Paired small products]: blocks 0 .. tiny_blocks - 1 are the tiny product's, the rest the short product's.
// The branch is uniform within a block, as the tiny product's block sum needs.
template <typename T>
__device__ void short_and_tiny_product_kernel(SmallProduct short_one, SmallProduct tiny_one, int tiny_blocks) {
  const int block = static_cast<int>(blockIdx.x);
  if (block < tiny_blocks) {
    tiny_product_block<T>(tiny_one, block);
  } else {
    const int threads = static_cast<int>((gridDim.x - tiny_blocks) * blockDim.x);
    short_product_elements<T>(short_one, (block - tiny_blocks) * static_cast<int>(blockDim.x) + threadIdx.x, threads);
  }
}

// ---- optimizer ----------------------------------------------------------------------------------------------

// Note [Updates four elements at a time]: an optimizer update is bound by memory (SGD with momentum moves 20 bytes
// per element), and 4-byte loads and stores reach a good deal less of the memory's bandwidth than the elementwise
// kernels' 16-byte ones (docs/benchmarks.md, "Design measurements"). So where every array of a tensor's update starts
// on a 16-byte boundary, a thread takes groups of four elements (one float4 load or store per array), then the last
// n % 4 elements one at a time; otherwise one at a time throughout. The rule runs per element either way, so the
// results are bitwise the same. The bodies capture by value: a reference into the kernel's parameters (a multi-tensor
// kernel's entries) held by a closure made every thread copy them all to local memory first (a 3.5 KiB stack frame,
// many times slower).
template <int kWidth>
struct Lanes {
  float v[kWidth];
};

template <int kWidth>
__device__ Lanes<kWidth> load_lanes(const float* p, int64_t i) {
  if constexpr (kWidth == 4) {
    const float4 f = *reinterpret_cast<const float4*>(p + i);
    return {{f.x, f.y, f.z, f.w}};
  } else {
    return {{p[i]}};
  }
}

template <int kWidth>
__device__ void store_lanes(float* p, int64_t i, const Lanes<kWidth>& lanes) {
  if constexpr (kWidth == 4) {
    *reinterpret_cast<float4*>(p + i) = make_float4(lanes.v[0], lanes.v[1], lanes.v[2], lanes.v[3]);
  } else {
    p[i] = lanes.v[0];
  }
}

// Calls body(i, width) for this thread's share of [0, n): groups of four (width an integral_constant of 4) when
// `by_four`, and single elements (width 1) for what is left.
template <typename Body>
__device__ void for_each_group(int64_t n, bool by_four, Body body) {
  int64_t single = 0;
  if (by_four) {
    const int64_t groups = n / 4;
    for (int64_t g = global_thread(); g < groups; g += grid_threads()) body(g * 4, std::integral_constant<int, 4>{});
    single = groups * 4;
  }
  for (int64_t i = single + global_thread(); i < n; i += grid_threads()) body(i, std::integral_constant<int, 1>{});
}

// The SGD rule for one element: returns the new parameter and updates `momentum` (read only after the first step).
// See Note [Rounding like the CPU].
__device__ float sgd_rule(float param, float d, float& momentum, const SgdUpdate& u, float lr) {
  if (u.weight_decay != 0.0f) d = __fadd_rn(d, __fmul_rn(u.weight_decay, param));
  if (u.momentum != 0.0f) {
    momentum = u.first_step ? d : __fadd_rn(__fmul_rn(u.momentum, momentum), __fmul_rn(1.0f - u.dampening, d));
    d = u.nesterov ? __fadd_rn(d, __fmul_rn(u.momentum, momentum)) : momentum;
  }
  return __fsub_rn(param, __fmul_rn(lr, d));
}

// The SGD rule for the elements of one tensor that this thread covers; lr_on_device, when not null, replaces u.lr
// (Note [Hyper-parameters in device memory] in fused.h). The single-tensor and the multi-tensor kernels both run it,
// so their results are bitwise equal (Note [Multi-tensor updates] in fused.h).
__device__ void sgd_elements(int64_t n, float* param, const float* grad, float* momentum_buffer, const SgdUpdate& u,
                             const float* lr_on_device) {
  const float lr = lr_on_device != nullptr ? *lr_on_device : u.lr;
  const bool momentum = u.momentum != 0.0f;
  const bool by_four = aligned16(param) && aligned16(grad) && (!momentum || aligned16(momentum_buffer));
  for_each_group(n, by_four, [=](int64_t i, auto width) {
    constexpr int kWidth = decltype(width)::value;
    Lanes<kWidth> p = load_lanes<kWidth>(param, i);
    const Lanes<kWidth> g = load_lanes<kWidth>(grad, i);
    Lanes<kWidth> buffer{};
    if (momentum && !u.first_step) buffer = load_lanes<kWidth>(momentum_buffer, i);
#pragma unroll
    for (int lane = 0; lane < kWidth; ++lane) p.v[lane] = sgd_rule(p.v[lane], g.v[lane], buffer.v[lane], u, lr);
    if (momentum) store_lanes(momentum_buffer, i, buffer);
    store_lanes(param, i, p);
  });
}

__device__ void sgd_kernel(int64_t n, float* param, const float* grad, float* momentum_buffer, SgdUpdate u,
                           const float* lr_on_device) {
  sgd_elements(n, param, grad, momentum_buffer, u, lr_on_device);
}

// The Adam rule for one element: returns the new parameter and updates the moments (max_exp_avg_sq only with
// `amsgrad`). See Note [Rounding like the CPU]; the operations and their order are those of fused.h's AdamUpdate.
// small_weight picks torch.lerp's form.
__device__ float adam_rule(float param, float d, float& exp_avg, float& exp_avg_sq, float& max_exp_avg_sq,
                           bool amsgrad, bool small_weight, const AdamUpdate& u) {
  const float scaled = __fmul_rn(param, u.param_scale);
  if (u.weight_decay != 0.0f) d = __fadd_rn(d, __fmul_rn(u.weight_decay, scaled));
  const float m = exp_avg;
  exp_avg = small_weight ? __fadd_rn(m, __fmul_rn(u.one_minus_beta1, __fsub_rn(d, m)))
                         : __fsub_rn(d, __fmul_rn(__fsub_rn(d, m), __fsub_rn(1.0f, u.one_minus_beta1)));
  float second = __fadd_rn(__fmul_rn(exp_avg_sq, u.beta2), __fmul_rn(__fmul_rn(u.one_minus_beta2, d), d));
  exp_avg_sq = second;
  if (amsgrad) {
    if (!(second > max_exp_avg_sq || isnan(second))) second = max_exp_avg_sq;  // NaN in either stays NaN
    max_exp_avg_sq = second;
  }
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(second), u.bias_correction2_sqrt), u.eps);
  return __fadd_rn(scaled, __fdiv_rn(__fmul_rn(-u.step_size, exp_avg), denom));
}

// The Adam rule for the elements of one tensor that this thread covers. step_factors, when not null, replaces
// u.param_scale, u.step_size and u.bias_correction2_sqrt (Note [Hyper-parameters in device memory] in fused.h).
// Shared by the single- and the multi-tensor kernels, as sgd_elements is.
__device__ void adam_elements(int64_t n, float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                              float* max_exp_avg_sq, AdamUpdate u, const float* step_factors) {
  if (step_factors != nullptr) {
    u.param_scale = step_factors[0];
    u.step_size = step_factors[1];
    u.bias_correction2_sqrt = step_factors[2];
  }
  const bool small_weight = fabsf(u.one_minus_beta1) < 0.5f;  // torch.lerp's choice of form
  const bool amsgrad = max_exp_avg_sq != nullptr;
  const bool by_four = aligned16(param) && aligned16(grad) && aligned16(exp_avg) && aligned16(exp_avg_sq) &&
                       aligned16(max_exp_avg_sq);
  for_each_group(n, by_four, [=](int64_t i, auto width) {
    constexpr int kWidth = decltype(width)::value;
    Lanes<kWidth> p = load_lanes<kWidth>(param, i);
    const Lanes<kWidth> g = load_lanes<kWidth>(grad, i);
    Lanes<kWidth> m = load_lanes<kWidth>(exp_avg, i);
    Lanes<kWidth> v = load_lanes<kWidth>(exp_avg_sq, i);
    Lanes<kWidth> v_max{};
    if (amsgrad) v_max = load_lanes<kWidth>(max_exp_avg_sq, i);
#pragma unroll
    for (int lane = 0; lane < kWidth; ++lane)
      p.v[lane] = adam_rule(p.v[lane], g.v[lane], m.v[lane], v.v[lane], v_max.v[lane], amsgrad, small_weight, u);
    store_lanes(exp_avg, i, m);
    store_lanes(exp_avg_sq, i, v);
    if (amsgrad) store_lanes(max_exp_avg_sq, i, v_max);
    store_lanes(param, i, p);
  });
}

__device__ void adam_kernel(int64_t n, float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                            float* max_exp_avg_sq, AdamUpdate u, const float* step_factors) {
  adam_elements(n, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, u, step_factors);
}

// Note [Multi-tensor kernel arguments]: a multi-tensor kernel takes its entries by value, in one kernel argument of
// at most kArgumentBytes (under CUDA's 4 KiB limit on a launch's arguments), so a captured graph keeps them in the
// node and a replay reads nothing from the host. Entry y is updated by the blocks of row y of the grid, with the
// grid-stride loop of the single-tensor kernel along x, so the entries are updated side by side (one after another
// in each thread, a small model's update would wait for one round trip to memory per tensor); a longer list is
// launched in several blocks of entries.
constexpr size_t kArgumentBytes = 3584;

template <typename Entry>
struct EntryBlock {
  static constexpr int kCapacity = static_cast<int>((kArgumentBytes - sizeof(int)) / sizeof(Entry));
  Entry entries[kCapacity];
  int count;
};
static_assert(sizeof(EntryBlock<SgdEntry>) <= 4096 && EntryBlock<SgdEntry>::kCapacity >= 16);
static_assert(sizeof(EntryBlock<AdamEntry>) <= 4096 && EntryBlock<AdamEntry>::kCapacity >= 16);

__device__ void multi_sgd_kernel(EntryBlock<SgdEntry> block) {
  const SgdEntry& e = block.entries[blockIdx.y];
  sgd_elements(e.n, e.param, e.grad, e.momentum_buffer, e.update, e.lr);
}

__device__ void multi_adam_kernel(EntryBlock<AdamEntry> block) {
  const AdamEntry& e = block.entries[blockIdx.y];
  adam_elements(e.n, e.param, e.grad, e.exp_avg, e.exp_avg_sq, e.max_exp_avg_sq, e.update, e.step_factors);
}

// Launches `kernel` over the entries with elements, kCapacity entries per launch, each launch's grid a row of blocks
// per entry (Note [Multi-tensor kernel arguments]), the rows as long as its largest entry needs.
template <auto kKernel, typename Entry>
void launch_blocks(const std::vector<Entry>& entries, cudaStream_t stream) {
  EntryBlock<Entry> block{};
  int64_t largest = 0;
  const auto flush = [&] {
    if (block.count == 0) return;
    launch<kKernel>(dim3(static_cast<unsigned>(blocks_for(largest)), static_cast<unsigned>(block.count)), kThreads,
                    stream, block);
    block.count = 0;
    largest = 0;
  };
  for (const Entry& entry : entries) {
    if (entry.n == 0) continue;
    block.entries[block.count++] = entry;
    largest = std::max(largest, entry.n);
    if (block.count == EntryBlock<Entry>::kCapacity) flush();
  }
  flush();
}

struct ClipByNormOp {  // the norm stays in device memory: no host round trip
  const float* norm;
  float max_norm;
  __device__ float operator()(float x, float) const {
    // As the CPU backend (and PyTorch) evaluate max_norm / (norm + 1e-6), then clamp it to at most 1.
    float factor = __fmul_rn(__fdiv_rn(1.0f, __fadd_rn(*norm, 1e-6f)), max_norm);
    if (factor > 1.0f) factor = 1.0f;  // NaN stays NaN
    return __fmul_rn(x, factor);
  }
};

}  // namespace

// ---- launchers ----------------------------------------------------------------------------------------------

void fill(float* out, const Strided& layout, float value, cudaStream_t stream) {
  launch_elementwise<0>(layout, out, nullptr, nullptr, FillOp{value}, stream);
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
  launch_elementwise<1>(layout, dst, src, nullptr, CopyOp{}, stream);
}

void binary(backend::BinaryOp op, const float* a, const float* b, float* out, const Strided& layout,
            cudaStream_t stream) {
  switch (op) {
    case backend::BinaryOp::Add: return launch_elementwise<2>(layout, out, a, b, AddOp{}, stream);
    case backend::BinaryOp::Sub: return launch_elementwise<2>(layout, out, a, b, SubOp{}, stream);
    case backend::BinaryOp::Mul: return launch_elementwise<2>(layout, out, a, b, MulOp{}, stream);
  }
}

void axpy(float alpha, const float* x, float* y, int64_t n, cudaStream_t stream) {
  launch_contiguous<2>(n, y, y, x, AxpyOp{alpha}, stream);
}

void scale(const float* x, float s, float* out, int64_t n, cudaStream_t stream) {
  launch_contiguous<1>(n, out, x, nullptr, ScaleOp{s}, stream);
}

void unary(backend::UnaryOp op, const float* x, float* out, int64_t n, cudaStream_t stream) {
  switch (op) {
    case backend::UnaryOp::Relu: return launch_contiguous<1>(n, out, x, nullptr, ReluOp{}, stream);
    case backend::UnaryOp::Tanh: return launch_contiguous<1>(n, out, x, nullptr, TanhOp{}, stream);
  }
}

void unary_backward(backend::UnaryOp op, const float* grad, const float* saved, float* out, int64_t n,
                    cudaStream_t stream) {
  switch (op) {
    case backend::UnaryOp::Relu: return launch_contiguous<2>(n, out, grad, saved, ReluBackwardOp{}, stream);
    case backend::UnaryOp::Tanh: return launch_contiguous<2>(n, out, grad, saved, TanhBackwardOp{}, stream);
  }
}

void broadcast_scalar(const float* scalar, float scale, float* out, int64_t n, cudaStream_t stream) {
  launch_contiguous<0>(n, out, nullptr, nullptr, ScaledScalarOp{scalar, scale}, stream);
}

void mse_backward(const float* grad, const float* input, const float* target, float* grad_input, int64_t n,
                  cudaStream_t stream) {
  if (n == 0) return;
  launch_contiguous<2>(n, grad_input, input, target, MseBackwardOp{grad, static_cast<double>(n)}, stream);
}

void sgd_update(float* param, const float* grad, float* momentum_buffer, int64_t n, const SgdUpdate& update,
                const float* lr_on_device, cudaStream_t stream) {
  if (n == 0) return;
  launch<sgd_kernel>(blocks_for(n), kThreads, stream, n, param, grad, momentum_buffer, update, lr_on_device);
}

void adam_update(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, float* max_exp_avg_sq, int64_t n,
                 const AdamUpdate& update, const float* step_factors, cudaStream_t stream) {
  if (n == 0) return;
  launch<adam_kernel>(blocks_for(n), kThreads, stream, n, param, grad, exp_avg, exp_avg_sq,
                      update.amsgrad ? max_exp_avg_sq : nullptr, update, step_factors);
}

void sgd_update(const std::vector<SgdEntry>& entries, cudaStream_t stream) {
  launch_blocks<multi_sgd_kernel>(entries, stream);
}

void adam_update(const std::vector<AdamEntry>& entries, cudaStream_t stream) {
  launch_blocks<multi_adam_kernel>(entries, stream);
}

void clip_by_norm(float* x, int64_t n, const float* norm, float max_norm, cudaStream_t stream) {
  launch_contiguous<1>(n, x, x, nullptr, ClipByNormOp{norm, max_norm}, stream);
}

// Launches the body for the products' operand type: float32, or bfloat16 (Note [Short products]).
template <auto float_body, auto bfloat16_body, typename... Args>
void launch_small_product(bool bfloat16, dim3 grid, cudaStream_t stream, const Args&... args) {
  if (bfloat16) {
    launch<bfloat16_body>(grid, kThreads, stream, args...);
  } else {
    launch<float_body>(grid, kThreads, stream, args...);
  }
}

void check_tiny_product(const SmallProduct& product) {
  TANDEM_INTERNAL_ASSERT(product.m > 0 && product.n > 0 && product.k > 0 && tiny_product_blocks(product) <= INT_MAX &&
                             product.bias == nullptr && !product.relu,
                         "cuda tiny_product: got m = ", product.m, ", n = ", product.n, ", k = ", product.k,
                         " but expected positive sizes, at most INT_MAX blocks, and no bias or ReLU");
}

void check_short_product(const SmallProduct& product) {
  TANDEM_INTERNAL_ASSERT(product.m > 0 && product.n > 0 && product.k > 0 && product.m * product.n <= INT_MAX &&
                             product.k <= INT_MAX && product.a_row_sums == nullptr &&
                             !(product.accumulate && (product.bias != nullptr || product.relu)),
                         "cuda short_product: got m = ", product.m, ", n = ", product.n, ", k = ", product.k,
                         " but expected positive sizes within 32-bit indices, no row sums, and no bias or ReLU with ",
                         "accumulate");
}

void tiny_product(const SmallProduct& product, cudaStream_t stream) {
  check_tiny_product(product);
  launch_small_product<tiny_product_kernel<float>, tiny_product_kernel<__nv_bfloat16>>(
      product.bfloat16, static_cast<unsigned>(tiny_product_blocks(product)), stream, product);
}

void short_product(const SmallProduct& product, cudaStream_t stream) {
  check_short_product(product);
  launch_small_product<short_product_kernel<float>, short_product_kernel<__nv_bfloat16>>(
      product.bfloat16, blocks_for(product.m * product.n), stream, product);
}

void short_and_tiny_product(const SmallProduct& short_one, const SmallProduct& tiny_one, cudaStream_t stream) {
  check_short_product(short_one);
  check_tiny_product(tiny_one);
  const int64_t tiny_blocks = tiny_product_blocks(tiny_one);
  const int64_t blocks = tiny_blocks + blocks_for(short_one.m * short_one.n);
  TANDEM_INTERNAL_ASSERT(short_one.bfloat16 == tiny_one.bfloat16 && blocks <= INT_MAX,
                         "cuda short_and_tiny_product: operands of one type and at most INT_MAX blocks, got ",
                         blocks, " blocks");
  launch_small_product<short_and_tiny_product_kernel<float>, short_and_tiny_product_kernel<__nv_bfloat16>>(
      short_one.bfloat16, static_cast<unsigned>(blocks), stream, short_one, tiny_one, static_cast<int>(tiny_blocks));
}

void sum_dim(const float* x, float* out, int64_t outer, int64_t reduce, int64_t inner, cudaStream_t stream) {
  if (outer == 0 || inner == 0) return;
  if (inner == 1) {
    if (reduce <= kThreads) {
      launch<sum_rows_warp_kernel>(blocks_for(outer * 32), kThreads, stream, x, out, outer, reduce);
    } else {
      const int blocks = static_cast<int>(std::min(outer, kMaxBlocks));
      launch<sum_rows_block_kernel>(blocks, kThreads, stream, x, out, outer, reduce);
    }
  } else {
    int64_t columns_per_block = 2;
    while (columns_per_block < 32 && columns_per_block < inner) columns_per_block *= 2;
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

void mse_forward(const float* input, const float* target, int64_t n, float* out, float* scratch,
                 cudaStream_t stream) {
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

}  // namespace tandem::cuda::kernels
