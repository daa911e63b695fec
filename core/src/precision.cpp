#include "tandem/core/precision.h"

#include <ostream>

#include "tandem/core/error.h"

namespace tandem {

const char* precision_name(Precision precision) {
  switch (precision) {
    case Precision::Float32: return "fp32";
    case Precision::TF32: return "tf32";
    case Precision::BFloat16: return "bf16";
  }
  TANDEM_INTERNAL_ASSERT(false, "precision_name: unknown precision ", static_cast<int>(precision));
}

Precision parse_precision(std::string_view name) {
  for (const Precision precision : {Precision::Float32, Precision::TF32, Precision::BFloat16})
    if (name == precision_name(precision)) return precision;
  TANDEM_FAIL("parse_precision: got '", excerpt(name), "' but expected fp32, tf32 or bf16");
}

std::ostream& operator<<(std::ostream& os, Precision precision) { return os << precision_name(precision); }

}  // namespace tandem
