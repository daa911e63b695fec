#include "tandem/core/error.h"

#include <cstdio>
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

bool error_location_wanted() {
#ifdef NDEBUG
  static const bool wanted = [] {
    const char* value = std::getenv("TANDEM_ERROR_LOCATION");
    return value != nullptr && std::strcmp(value, "1") == 0;
  }();
  return wanted;
#else
  return true;
#endif
}

std::string error_message(std::string message, const char* file, int line, bool with_location) {
  if (with_location) message += concat(" (", file, ":", line, ")");
  return message;
}

std::string internal_error_message(std::string_view message, const char* condition, const char* file, int line) {
  return concat(message, message.empty() ? "" : " ", "(internal assert failed: ", condition, " at ", file, ":", line,
                "; this is a bug in tandem, please report it)");
}

void throw_error(const char* file, int line, const std::string& message) {
  throw Error(error_message(message, file, line, error_location_wanted()));
}

void throw_internal_error(const char* file, int line, const char* condition, const std::string& message) {
  throw InternalError(internal_error_message(message, condition, file, line));
}

void ReportOnce::report(std::string_view what) noexcept {
  if (reported_.exchange(true, std::memory_order_relaxed)) return;
  // One fprintf call, so that lines of threads reporting at once do not interleave; no allocation.
  std::fprintf(stderr,
               "tandem: %s: %.*s (reported instead of thrown, from a path that destructors take; later failures "
               "here are not reported)\n",
               where_, static_cast<int>(what.size()), what.data());
}

}  // namespace tandem::detail
