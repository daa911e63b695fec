#include "tandem/core/error.h"

#include <cstdlib>
#include <cstring>

namespace tandem::detail {

namespace {
bool location_wanted() {
  static const bool wanted = [] {
    const char* value = std::getenv("TANDEM_ERROR_LOCATION");
    return value != nullptr && std::strcmp(value, "1") == 0;
  }();
  return wanted;
}
}  // namespace

void throw_error(const char* file, int line, const std::string& message) {
  if (location_wanted()) throw Error(concat(message, " (", file, ":", line, ")"));
  throw Error(message);
}

}  // namespace tandem::detail
