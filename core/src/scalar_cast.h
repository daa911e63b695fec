#pragma once
// Checked conversions of one host value, for Tensor::item<T>() and for the fill value of full/fill_: like PyTorch's
// checked conversions of a Scalar, a value that T cannot hold (NaN or an infinity to int64, a finite value beyond
// T's largest finite value, an integer outside int64's range) throws instead of wrapping or saturating.

#include <cstdint>
#include <variant>

#include "tandem/core/bfloat16.h"

namespace tandem::detail {

// A host value of any element type, widened: integers exactly, floating values as double.
using HostScalar = std::variant<int64_t, double>;

// Errors: "<caller>: the value <v> cannot be converted to <T> without overflow".
// T is float, double, int64_t or BFloat16.
template <class T>
T checked_scalar_cast(HostScalar value, const char* caller);

}  // namespace tandem::detail
