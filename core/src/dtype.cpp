#include "tandem/core/dtype.h"

#include <ostream>

#include "tandem/core/error.h"

namespace tandem {

size_t element_size(DType dtype) {
  switch (dtype) {
    case DType::Float32: return sizeof(float);
    case DType::Int64: return sizeof(int64_t);
    case DType::BFloat16: return sizeof(BFloat16);
  }
  TANDEM_INTERNAL_ASSERT(false, "element_size: unknown dtype ", static_cast<int>(dtype));
}

const char* dtype_name(DType dtype) {
  switch (dtype) {
    case DType::Float32: return "float32";
    case DType::Int64: return "int64";
    case DType::BFloat16: return "bfloat16";
  }
  TANDEM_INTERNAL_ASSERT(false, "dtype_name: unknown dtype ", static_cast<int>(dtype));
}

bool is_floating_point(DType dtype) { return dtype == DType::Float32 || dtype == DType::BFloat16; }

std::ostream& operator<<(std::ostream& os, DType dtype) { return os << dtype_name(dtype); }

}  // namespace tandem
