#pragma once
// The CPU backend's dtype-generic element work: conversions between dtypes and fills by bit pattern.

#include <cstdint>

#include "tandem/core/tensor.h"

namespace tandem::cpu {

// dst = src converted elementwise (Note [Conversions] in element_convert.h); same shape, any strides (src may have
// stride-0 broadcast dims), any dtypes (equal ones copy).
void convert(const Tensor& src, const Tensor& dst);
// out (any strides, any dtype) = the element whose bits are the low element_size(out.dtype()) bytes of `bits`.
void fill_bits(const Tensor& out, uint64_t bits);

}  // namespace tandem::cpu
