// Conversions between dtypes and fills by bit pattern on the GPU: one grid-stride kernel over a Strided layout per
// pair of element types.

#include "cuda/convert.h"

#include "cuda/launch.cuh"
#include "cuda/strided_index.cuh"
#include "element_convert.h"
#include "tandem/core/error.h"

namespace tandem::cuda::kernels {
namespace {

template <typename To, typename From>
__device__ void convert_kernel(int64_t n, Strided s, To* dst, const From* src) {
  for (int64_t i = global_thread(); i < n; i += grid_threads()) {
    int64_t offset[kMaxOperands];
    strided_offsets<2>(i, s, offset);
    dst[offset[0]] = detail::convert_element<To>(src[offset[1]]);
  }
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
      launch<convert_kernel<To, From>>(blocks_for(n), kThreads, stream, n, layout, static_cast<To*>(dst),
                                       static_cast<const From*>(src));
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
