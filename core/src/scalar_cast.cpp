#include "scalar_cast.h"

#include <cmath>
#include <cstdint>
#include <limits>

#include "tandem/core/error.h"

namespace tandem::detail {
namespace {

template <class T>
const char* type_name() {
  if constexpr (std::is_same_v<T, float>) return "float32";
  if constexpr (std::is_same_v<T, double>) return "float64";
  if constexpr (std::is_same_v<T, int64_t>) return "int64";
  if constexpr (std::is_same_v<T, BFloat16>) return "bfloat16";
}

// The largest finite value of a floating type T.
template <class T>
double largest_finite() {
  if constexpr (std::is_same_v<T, BFloat16>) {
    return static_cast<float>(BFloat16::from_bits(0x7F7F));
  } else {
    return static_cast<double>(std::numeric_limits<T>::max());
  }
}

template <class T>
[[noreturn]] void overflow(const HostScalar& value, const char* caller) {
  std::visit([&](auto v) {
    TANDEM_FAIL(caller, ": the value ", v, " cannot be converted to ", type_name<T>(), " without overflow");
  }, value);
  std::abort();  // unreachable: TANDEM_FAIL throws
}

}  // namespace

template <class T>
T checked_scalar_cast(HostScalar value, const char* caller) {
  if (const int64_t* integer = std::get_if<int64_t>(&value)) {
    if constexpr (std::is_same_v<T, int64_t>) {
      return *integer;
    } else if constexpr (std::is_same_v<T, BFloat16>) {
      return BFloat16(static_cast<float>(*integer));  // through float32, as the elementwise conversion does
    } else {
      return static_cast<T>(*integer);  // int64 always fits in float's range
    }
  }
  const double real = std::get<double>(value);
  if constexpr (std::is_same_v<T, int64_t>) {
    constexpr double kTwoTo63 = 9223372036854775808.0;
    if (!(real >= -kTwoTo63 && real < kTwoTo63)) overflow<T>(value, caller);  // NaN fails the test too
    return static_cast<int64_t>(real);
  } else {
    if (std::isfinite(real) && std::abs(real) > largest_finite<T>()) overflow<T>(value, caller);
    if constexpr (std::is_same_v<T, BFloat16>) {
      return BFloat16(static_cast<float>(real));
    } else {
      return static_cast<T>(real);
    }
  }
}

template float checked_scalar_cast<float>(HostScalar, const char*);
template double checked_scalar_cast<double>(HostScalar, const char*);
template int64_t checked_scalar_cast<int64_t>(HostScalar, const char*);
template BFloat16 checked_scalar_cast<BFloat16>(HostScalar, const char*);

}  // namespace tandem::detail
