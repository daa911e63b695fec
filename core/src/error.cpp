#include "tandem/core/error.h"

#include <cstdlib>
#include <cstring>

namespace tandem {

std::string excerpt(std::string_view text, size_t max_chars) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out;
  size_t shown = 0;
  for (; shown < text.size() && out.size() < max_chars; ++shown) {
    const auto byte = static_cast<unsigned char>(text[shown]);
    if (byte >= 0x20 && byte < 0x7f && byte != '\\') {
      out += static_cast<char>(byte);
    } else {
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 15];
    }
  }
  if (shown < text.size()) out += "... (" + std::to_string(text.size()) + " bytes)";
  return out;
}

}  // namespace tandem

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
