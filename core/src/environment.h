#pragma once
// Reading process-wide settings from the environment.

#include <cstdlib>
#include <string_view>

namespace tandem::detail {

// Whether the environment variable `name` is set to exactly `value`.
inline bool environment_is(const char* name, std::string_view value) {
  const char* set = std::getenv(name);
  return set != nullptr && std::string_view(set) == value;
}

}  // namespace tandem::detail
