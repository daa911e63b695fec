// Conversions between dtypes and fills by bit pattern on the GPU: one grid-stride kernel over a Strided layout per
// pair of element types, and for aligned operands whose last dim runs in packs of four (contiguous ones, or views such
// as attention heads) kernels that move four elements per thread as one vector access each way (a float32 ->
// bfloat16 conversion reads 16 bytes and writes 8 per thread).

#include "cuda/convert.h"

#include "cuda/launch.cuh"
#include "cuda/strided_index.cuh"
#include "element_convert.h"
#include "tandem/core/error.h"

namespace tandem::cuda::kernels {
namespace {

template <typename To, typename From, typename Index>
__device__ void convert_kernel(int64_t n, Strided s, To* dst, const From* src) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    int64_t offset[kMaxOperands];
    strided_offsets<2, Index>(i, s, offset);
    dst[offset[0]] = detail::convert_element<To>(src[offset[1]]);
  }
}

// Four elements of T, aligned so that one access moves them all.
template <typename T>
struct alignas(4 * sizeof(T)) Pack4 {
  T v[4];
};

template <typename To, typename From>
__device__ Pack4<To> converted(const Pack4<From>& in) {
  Pack4<To> out;
#pragma unroll
  for (int k = 0; k < 4; ++k) out.v[k] = detail::convert_element<To>(in.v[k]);
  return out;
}

// src and dst contiguous and aligned to their Pack4: whole packs, then the last n % 4 elements by the first threads.
template <typename To, typename From>
__device__ void convert_pack4_kernel(int64_t n, To* dst, const From* src) {
  const int64_t packs = n / 4;
  for (int64_t i = global_thread(); i < packs; i += grid_threads()) {
    reinterpret_cast<Pack4<To>*>(dst)[i] = converted<To>(reinterpret_cast<const Pack4<From>*>(src)[i]);
  }
  const int64_t tail = packs * 4 + global_thread();
  if (tail < n) dst[tail] = detail::convert_element<To>(src[tail]);
}

// packs_of_4(s, 2) and both pointers aligned to their Pack4: one pack each way per thread, at the offsets of flat
// index 4 j.
template <typename To, typename From, typename Index>
__device__ void convert_strided_pack4_kernel(int64_t n, Strided s, To* dst, const From* src) {
  for (int64_t j = global_thread(); j < n / 4; j += grid_threads()) {
    int64_t offset[kMaxOperands];
    strided_offsets<2, Index>(4 * j, s, offset);
    const Pack4<From>& in = *reinterpret_cast<const Pack4<From>*>(src + offset[1]);
    *reinterpret_cast<Pack4<To>*>(dst + offset[0]) = converted<To>(in);
  }
}

template <typename T>
bool pack4_aligned(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % sizeof(Pack4<T>) == 0;
}

template <typename T>
__device__ void fill_kernel(int64_t n, Strided s, T* out, uint64_t bits) {
  const T value = detail::element_from_bits<T>(bits);
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    int64_t offset[kMaxOperands];
    strided_offsets<1>(i, s, offset);
    out[offset[0]] = value;
  }
}

}  // namespace

void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, const Strided& layout,
             cudaStream_t stream) {
  const int64_t n = elements_of(layout);
  if (n == 0) return;
  detail::with_element_type(src_dtype, "cuda::kernels::convert", [&](auto from) {
    detail::with_element_type(dst_dtype, "cuda::kernels::convert", [&](auto to) {
      using From = decltype(from);
      using To = decltype(to);
      auto* to_ptr = static_cast<To*>(dst);
      const auto* from_ptr = static_cast<const From*>(src);
      const bool packs = pack4_aligned<To>(dst) && pack4_aligned<From>(src);
      if (n >= 4 && all_contiguous(layout, 2) && packs) {
        launch<convert_pack4_kernel<To, From>>(blocks_for(n / 4), kThreads, stream, n, to_ptr, from_ptr);
      } else if (packs && packs_of_4(layout, 2) && fits_32_bits(layout, 2)) {
        launch<convert_strided_pack4_kernel<To, From, uint32_t>>(blocks_for(n / 4), kThreads, stream, n, layout,
                                                                 to_ptr, from_ptr);
      } else if (fits_32_bits(layout, 2)) {
        launch<convert_kernel<To, From, uint32_t>>(blocks_for(n), kThreads, stream, n, layout, to_ptr, from_ptr);
      } else {
        launch<convert_kernel<To, From, int64_t>>(blocks_for(n), kThreads, stream, n, layout, to_ptr, from_ptr);
      }
    });
  });
}

void fill_bits(void* out, DType dtype, const Strided& layout, uint64_t bits, cudaStream_t stream) {
  const int64_t n = elements_of(layout);
  if (n == 0) return;
  detail::with_element_type(dtype, "cuda::kernels::fill_bits", [&](auto element) {
    using T = decltype(element);
    launch<fill_kernel<T>>(blocks_for(n), kThreads, stream, n, layout, static_cast<T*>(out), bits);
  });
}

}  // namespace tandem::cuda::kernels
