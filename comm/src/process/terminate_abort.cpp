// TerminateAbort: std::terminate ends every process of the job, naming the rank and the exception.

#include "terminate_abort.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "tandem/core/error.h"

namespace tandem::comm::detail {
namespace {
std::atomic<TerminateAbort*> installed{nullptr};

std::string current_exception_message() {
  const std::exception_ptr current = std::current_exception();
  if (!current) return "std::terminate was called without an exception";
  try {
    std::rethrow_exception(current);
  } catch (const std::exception& e) {
    return std::string("an exception escaped: ") + e.what();
  } catch (...) {
    return "an exception that is not a std::exception escaped";
  }
}
}  // namespace

TerminateAbort::TerminateAbort(int rank, Abort abort) : rank_(rank), abort_(std::move(abort)) {
  TerminateAbort* expected = nullptr;
  TANDEM_INTERNAL_ASSERT(installed.compare_exchange_strong(expected, this), "TerminateAbort: a second handler");
  previous_ = std::set_terminate(&TerminateAbort::on_terminate);
}

TerminateAbort::~TerminateAbort() {
  std::set_terminate(previous_);
  installed.store(nullptr);
}

void TerminateAbort::on_terminate() {
  const std::string message = current_exception_message();
  if (TerminateAbort* self = installed.load()) {
    self->abort_("comm: rank " + std::to_string(self->rank_) + ": " + message);
  }
  std::fprintf(stderr, "comm: %s\n", message.c_str());
  std::abort();
}

}  // namespace tandem::comm::detail
