#pragma once
// The std::terminate handler of a multi-process group (Note [A distributed job never hangs] in watchdog.h): an
// exception that escapes on one rank ends the whole job instead of leaving the other ranks waiting for it.

#include <exception>
#include <functional>
#include <string_view>

namespace tandem::comm::detail {

// While alive, std::terminate writes "comm: rank R: terminate called: <the current exception's message>" through
// `abort` (which ends every process of the job and does not return). At most one lives at a time (one group per
// process); destroying it restores the handler that was installed before.
class TerminateAbort {
 public:
  using Abort = std::function<void(std::string_view message)>;
  TerminateAbort(int rank, Abort abort);
  ~TerminateAbort();
  TerminateAbort(const TerminateAbort&) = delete;
  TerminateAbort& operator=(const TerminateAbort&) = delete;

 private:
  [[noreturn]] static void on_terminate();

  int rank_;
  Abort abort_;
  std::terminate_handler previous_;
};

}  // namespace tandem::comm::detail
