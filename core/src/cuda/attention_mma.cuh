#pragma once
// The tensor-core building blocks of the bfloat16 attention kernels (attention_forward.cu, attention_backward.cu):
// cp.async tile copies, ldmatrix fragment loads and the m16n8k16 bf16 -> fp32 mma.sync, as PTX.
//
// Note [mma fragments]: for mma.m16n8k16, lane = 4 g + t (g = lane / 4, t = lane % 4) holds
//   A (16 x 16, row major) a0: (g, 2t..2t+1), a1: (g + 8, 2t..), a2: (g, 2t + 8..), a3: (g + 8, 2t + 8..);
//   B (16 x 8, k x n)      b0: (k 2t..2t+1, n g), b1: (k 2t + 8.., n g);
//   C (16 x 8, float)      c0, c1: (g, 2t..2t+1), c2, c3: (g + 8, 2t..2t+1),
// two bfloat16 to a register, the lower column (or k) in the low half. So the C fragments of two n-tiles side by side
// (columns 16j .. 16j + 15) are, rounded to bfloat16, the A fragment of k-step j of a product with that matrix on the
// left: P = softmax(S) goes from the S product into P V without leaving registers. ldmatrix.x4 loads four 8 x 8
// matrices whose rows the lanes 8i .. 8i + 7 address (matrix i), giving each lane element (g, 2t..2t+1) of each (with
// .trans, of each transposed): row-major tiles in shared memory become A fragments, and B fragments whose k runs
// along a stored row (non-transposed, K for Q K^T) or down a stored column (transposed, V for P V).
// Tiles are stored with rows padded by 8 elements (16 bytes), so the 8 rows that one ldmatrix matrix reads fall in
// different banks, and every row start stays 16-byte aligned for cp.async.

#include <cuda_bf16.h>

#include <cstdint>

namespace tandem::cuda::kernels::mma {

constexpr int kPad = 8;

__device__ __forceinline__ uint32_t shared_address(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// 16 bytes from global to shared memory, asynchronously; zeros when !valid (nothing is read then).
__device__ __forceinline__ void copy16(void* shared, const void* global, bool valid) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(shared_address(shared)), "l"(global),
               "r"(valid ? 16 : 0));
}
// 4 bytes likewise.
__device__ __forceinline__ void copy4(void* shared, const void* global, bool valid) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 4, %2;\n" ::"r"(shared_address(shared)), "l"(global),
               "r"(valid ? 4 : 0));
}
__device__ __forceinline__ void commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* shared) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(shared)));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* shared) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(shared_address(shared)));
}

// d += a b (Note [mma fragments]).
__device__ __forceinline__ void mma(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as a register of two bfloat16 (lo in the low half).
__device__ __forceinline__ uint32_t pack(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

// The A fragment of k-step j from C fragments c[2j], c[2j + 1] (Note [mma fragments]).
__device__ __forceinline__ void a_from_c(uint32_t (&a)[4], const float (&lo)[4], const float (&hi)[4]) {
  a[0] = pack(lo[0], lo[1]);
  a[1] = pack(lo[2], lo[3]);
  a[2] = pack(hi[0], hi[1]);
  a[3] = pack(hi[2], hi[3]);
}

// The address that this lane gives ldmatrix_x4 for:
//   an A fragment of rows [r0, r0 + 16) x columns [c0, c0 + 16) of a row-major tile;
__device__ __forceinline__ int a_row(int lane) { return lane % 16; }
__device__ __forceinline__ int a_col(int lane) { return lane / 16 * 8; }
//   B fragments of two n-tiles [n0, n0 + 16) with k along the stored row (rows n, columns k; non-transposed load):
//   registers 0, 1 for n-tile n0, 2, 3 for n0 + 8;
__device__ __forceinline__ int bn_row(int lane) { return (lane & 7) + ((lane >> 4) & 1) * 8; }
__device__ __forceinline__ int bn_col(int lane) { return ((lane >> 3) & 1) * 8; }
//   B fragments with k down the stored column (rows k, columns n; transposed load), registers as above.
__device__ __forceinline__ int bk_row(int lane) { return (lane & 7) + ((lane >> 3) & 1) * 8; }
__device__ __forceinline__ int bk_col(int lane) { return ((lane >> 4) & 1) * 8; }

// Copies rows [first, first + rows_in_tile) of a bfloat16 matrix (row stride `row` elements) into a padded tile
// (D + kPad per row) with cp.async, zeros past `rows`; `threads` threads take part.
template <int D, int kRows, int kThreadCount>
__device__ __forceinline__ void load_tile(__nv_bfloat16* tile, const __nv_bfloat16* base, int64_t row, int first,
                                          int rows) {
  constexpr int kChunks = D / 8;
  for (int i = threadIdx.x; i < kRows * kChunks; i += kThreadCount) {
    const int r = i / kChunks, chunk = i % kChunks;
    const bool valid = first + r < rows;
    copy16(tile + r * (D + kPad) + chunk * 8, base + (valid ? (first + r) * row + chunk * 8 : 0), valid);
  }
}

}  // namespace tandem::cuda::kernels::mma
