#include "tandem/core/matmul_settings.h"

#include <atomic>

#include "environment.h"
#include "tandem/core/autocast.h"

namespace tandem {
namespace {

using detail::environment_is;

// Each setting starts from the environment, read once, when it is first asked for or set.
std::atomic<bool>& tf32_setting() {
  static std::atomic<bool> allowed{environment_is("TANDEM_ALLOW_TF32", "1")};
  return allowed;
}

std::atomic<bool>& fused_linear_setting() {
  static std::atomic<bool> fused{!environment_is("TANDEM_FUSED_LINEAR", "0")};
  return fused;
}

std::atomic<bool>& fused_attention_setting() {
  static std::atomic<bool> fused{!environment_is("TANDEM_FUSED_ATTENTION", "0")};
  return fused;
}

}  // namespace

bool allow_tf32() { return tf32_setting().load(std::memory_order_relaxed); }
void set_allow_tf32(bool allow) { tf32_setting().store(allow, std::memory_order_relaxed); }
Precision default_precision() {
  return autocast_precision().value_or(allow_tf32() ? Precision::TF32 : Precision::Float32);
}

bool fused_linear() { return fused_linear_setting().load(std::memory_order_relaxed); }
void set_fused_linear(bool fused) { fused_linear_setting().store(fused, std::memory_order_relaxed); }

bool fused_attention_enabled() { return fused_attention_setting().load(std::memory_order_relaxed); }
void set_fused_attention_enabled(bool enabled) {
  fused_attention_setting().store(enabled, std::memory_order_relaxed);
}

}  // namespace tandem
