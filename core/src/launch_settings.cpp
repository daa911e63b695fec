#include "tandem/core/launch_settings.h"

#include <atomic>

#include "environment.h"

namespace tandem {
namespace {

std::atomic<bool>& dependent_launch_setting() {
  static std::atomic<bool> enabled{!detail::environment_is("TANDEM_DEPENDENT_LAUNCH", "0")};
  return enabled;
}

}  // namespace

bool dependent_launches() { return dependent_launch_setting().load(std::memory_order_relaxed); }
void set_dependent_launches(bool enabled) { dependent_launch_setting().store(enabled, std::memory_order_relaxed); }

}  // namespace tandem
