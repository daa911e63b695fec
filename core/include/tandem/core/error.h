#pragma once
// The exception types of tandem and the checks that throw them: TANDEM_CHECK / TANDEM_FAIL for user mistakes and
// library failures (tandem::Error), TANDEM_INTERNAL_ASSERT for tandem's own invariants (tandem::InternalError), and
// ReportOnce for the paths that must not throw at all (destructors and the free paths they call).

#include <atomic>
#include <cstddef>
#include <exception>
#include <sstream>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>

namespace tandem {

// Every user mistake throws tandem::Error whose what() names the function, the bad value and what was expected,
// e.g. "comm::scatter: chunk_sizes sum to 7 but dim 0 has size 6".
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A broken invariant of tandem itself (TANDEM_INTERNAL_ASSERT): a bug in tandem, not a mistake of the caller. It
// derives from Error, so every catch site for Error handles it too; its what() always ends with the failed
// condition and the file:line of the assert.
class InternalError : public Error {
 public:
  using Error::Error;
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

// Whether Error messages end with " (file:line)" of the check that threw: always when tandem is built without
// NDEBUG (a debug build); in a release build only when TANDEM_ERROR_LOCATION=1 is set in the environment (read
// once). Off by default in release builds so that messages stay stable for users and tests.
bool error_location_wanted();
// `message`, followed by " (file:line)" when `with_location`.
std::string error_message(std::string message, const char* file, int line, bool with_location);
// The what() of an InternalError: "<message> (internal assert failed: <condition> at file:line; this is a bug in
// tandem, please report it)". The location is always there.
std::string internal_error_message(std::string_view message, const char* condition, const char* file, int line);

// Throws Error(error_message(message, file, line, error_location_wanted())).
[[noreturn]] void throw_error(const char* file, int line, const std::string& message);
// Throws InternalError(internal_error_message(message, condition, file, line)).
[[noreturn]] void throw_internal_error(const char* file, int line, const char* condition, const std::string& message);

// Note [No throw on free paths]: destructors, and everything they call (Storage releasing its bytes into the
// allocators, a Scratch block going back to the caching allocator, a marker's event going back to its pool, an
// AllReduceWork joining its collective), must not throw: an exception that leaves a destructor terminates the
// process, and so does one thrown while another one unwinds the stack. Those paths are noexcept; what fails on them
// (a broken allocator invariant, a CUDA error, an allocation of bookkeeping memory) is caught and reported on stderr
// instead, once per site so that a failure in a loop does not flood the log, and the path goes on as far as it safely
// can (at worst a block or an event is leaked). A site is a static ReportOnce:
//
//   static constinit detail::ReportOnce failures("returning a block to the caching allocator");
//   failures.run([&] { ... });
class ReportOnce {
 public:
  constexpr explicit ReportOnce(const char* where) : where_(where) {}
  ReportOnce(const ReportOnce&) = delete;
  ReportOnce& operator=(const ReportOnce&) = delete;

  // Writes "tandem: <where>: <what> (reported instead of thrown, ...)" to stderr, unless this site has reported
  // before.
  void report(std::string_view what) noexcept;

  // Calls fn(); whatever it throws is reported and not rethrown.
  template <typename Fn>
  void run(Fn&& fn) noexcept {
    try {
      std::forward<Fn>(fn)();
    } catch (const std::exception& e) {
      report(e.what());
    } catch (...) {
      report("an exception that is not a std::exception");
    }
  }

 private:
  const char* where_;
  std::atomic<bool> reported_{false};
};

}  // namespace detail
}  // namespace tandem

// TANDEM_CHECK(cond, "fn: got ", value, " but expected ", other): throws tandem::Error when cond is false.
// The message parts are only formatted on failure.
#define TANDEM_CHECK(cond, ...)                                                                 \
  do {                                                                                          \
    if (!(cond)) [[unlikely]] {                                                                 \
      ::tandem::detail::throw_error(__FILE__, __LINE__, ::tandem::detail::concat(__VA_ARGS__)); \
    }                                                                                           \
  } while (false)

// TANDEM_FAIL("fn: ..."): throws tandem::Error unconditionally.
#define TANDEM_FAIL(...) ::tandem::detail::throw_error(__FILE__, __LINE__, ::tandem::detail::concat(__VA_ARGS__))

// TANDEM_INTERNAL_ASSERT(cond, "fn: ", what): throws tandem::InternalError when cond is false. For tandem's own
// invariants only (what tandem's code guarantees to itself, e.g. a pointer handed out by the allocator, an enum value
// the backend switch covers), never for anything a caller can pass: a failure is a bug in tandem. The message parts
// are optional and only formatted on failure.
#define TANDEM_INTERNAL_ASSERT(cond, ...)                                                                       \
  do {                                                                                                          \
    if (!(cond)) [[unlikely]] {                                                                                 \
      ::tandem::detail::throw_internal_error(__FILE__, __LINE__, #cond, ::tandem::detail::concat(__VA_ARGS__)); \
    }                                                                                                           \
  } while (false)
