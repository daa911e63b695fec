#pragma once
// DType: the element type of a tensor. float32 is the default and the type of every arithmetic op; int64 holds
// labels and indices; bfloat16 (bfloat16.h) is a storage type. Names as PyTorch prints them: "float32", "int64",
// "bfloat16".

#include <cstddef>
#include <cstdint>
#include <iosfwd>
#include <type_traits>

#include "tandem/core/bfloat16.h"

namespace tandem {

enum class DType : uint8_t { Float32, Int64, BFloat16 };

size_t element_size(DType dtype);  // bytes per element
const char* dtype_name(DType dtype);
// Float32 and BFloat16: the dtypes that can require gradients (as in PyTorch, integer tensors cannot).
bool is_floating_point(DType dtype);
std::ostream& operator<<(std::ostream& os, DType dtype);  // dtype_name

// The C++ element types of the dtypes: float, int64_t and BFloat16. (Type traits, not concepts: the CUDA sources
// include this header as C++17.)
template <class T>
inline constexpr bool is_element_type_v =
    std::is_same_v<T, float> || std::is_same_v<T, int64_t> || std::is_same_v<T, BFloat16>;

template <class T>
constexpr DType dtype_of() {
  static_assert(is_element_type_v<T>, "dtype_of: T must be float, int64_t or BFloat16");
  if constexpr (std::is_same_v<T, float>) {
    return DType::Float32;
  } else if constexpr (std::is_same_v<T, int64_t>) {
    return DType::Int64;
  } else {
    return DType::BFloat16;
  }
}

}  // namespace tandem
