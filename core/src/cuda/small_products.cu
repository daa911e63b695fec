// The CUDA backend's small products (Note [Tiny products], Note [Short products] and Note [Paired small products] in
// small_products.h): one block per output element of a tiny product, one thread per output element of a short one,
// both summing in float32 in a fixed order.

#include "cuda/small_products.h"

#include <cuda_bf16.h>

#include <climits>

#include "cuda/launch.cuh"
#include "cuda/warp_reduce.cuh"
#include "tandem/core/error.h"

namespace tandem::cuda::kernels {
namespace {

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

}  // namespace

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

}  // namespace tandem::cuda::kernels
