#pragma once
// One exception type for every user mistake and every library failure, and the checks that throw it.

#include <cstddef>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>

namespace tandem {

// Every user mistake throws tandem::Error whose what() names the function, the bad value and what was expected,
// e.g. "comm::scatter: chunk_sizes sum to 7 but dim 0 has size 6".
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A piece of untrusted text (a CSV cell, a JSON fragment, a file name) fit for one line of an error message: at most
// `max_chars` characters, control and non-ASCII bytes escaped as \xNN, and a note of the full length when cut, e.g.
// `excerpt(cell)` -> "1.5e9999999999999999999999999999999999999999999999999999999... (50000000 bytes)".
std::string excerpt(std::string_view text, size_t max_chars = 60);

namespace detail {

template <typename... Args>
std::string concat(const Args&... args) {
  std::ostringstream os;
  (os << ... << args);
  return os.str();
}

// Throws Error(message). `file` and `line` are kept out of what() so that messages stay stable for users and tests;
// they are appended only when TANDEM_ERROR_LOCATION=1 is set in the environment (for debugging).
[[noreturn]] void throw_error(const char* file, int line, const std::string& message);

}  // namespace detail
}  // namespace tandem

// TANDEM_CHECK(cond, "fn: got ", value, " but expected ", other): throws tandem::Error when cond is false.
// The message parts are only formatted on failure.
#define TANDEM_CHECK(cond, ...)                                                          \
  do {                                                                                   \
    if (!(cond)) [[unlikely]] {                                                          \
      ::tandem::detail::throw_error(__FILE__, __LINE__, ::tandem::detail::concat(__VA_ARGS__)); \
    }                                                                                    \
  } while (false)

// TANDEM_FAIL("fn: ..."): throws tandem::Error unconditionally.
#define TANDEM_FAIL(...) ::tandem::detail::throw_error(__FILE__, __LINE__, ::tandem::detail::concat(__VA_ARGS__))
