#include "tandem/core/autocast.h"

#include "tandem/core/error.h"

namespace tandem {
namespace {

thread_local std::optional<Precision> thread_autocast;

}  // namespace

std::optional<Precision> autocast_precision() { return thread_autocast; }

AutocastGuard::AutocastGuard(DType dtype) : previous_(thread_autocast) {
  TANDEM_CHECK(dtype == DType::BFloat16 || dtype == DType::Float32, "AutocastGuard: dtype is ", dtype,
               " but expected bfloat16 (autocast on) or float32 (autocast off)");
  thread_autocast = dtype == DType::BFloat16 ? std::optional<Precision>(Precision::BFloat16) : std::nullopt;
}

AutocastGuard::~AutocastGuard() { thread_autocast = previous_; }

namespace detail {

AutocastStateGuard::AutocastStateGuard(std::optional<Precision> precision) : previous_(thread_autocast) {
  thread_autocast = precision;
}

AutocastStateGuard::~AutocastStateGuard() { thread_autocast = previous_; }

}  // namespace detail
}  // namespace tandem
