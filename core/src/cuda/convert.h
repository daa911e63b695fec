#pragma once
// Host launchers of the dtype-generic CUDA kernels (convert.cu): conversions between dtypes and fills by bit pattern.
// Raw device pointers, a Strided layout (operand 0 = the output, operand 1 = the source) and the stream to launch
// on; the caller has set the current device. Each launcher checks its launch (throws tandem::Error).

#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/strided_layout.h"
#include "tandem/core/dtype.h"

namespace tandem::cuda::kernels {

// dst = src converted elementwise (Note [Conversions] in element_convert.h); equal dtypes copy.
void convert(const void* src, DType src_dtype, void* dst, DType dst_dtype, const Strided& layout,
             cudaStream_t stream);
// out = the element of `dtype` whose bits are the low element_size(dtype) bytes of `bits`.
void fill_bits(void* out, DType dtype, const Strided& layout, uint64_t bits, cudaStream_t stream);

}  // namespace tandem::cuda::kernels
