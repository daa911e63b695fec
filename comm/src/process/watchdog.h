#pragma once
// Note [A distributed job never hangs]: a process of a distributed job can wait forever on others: in an MPI call,
// in a rendezvous, or on the GPU in an NCCL kernel whose peers never arrive (one rank threw, or is stuck). No such
// wait is allowed to last. Every blocking host call of a group and every collective issued on a device is armed with
// a deadline (ProcessGroupOptions::timeout) on the group's Watchdog; a watchdog thread checks the armed entries a few
// times a second. When one is past its deadline, or a device entry's poll reports an error (NCCL's asynchronous
// error), the watchdog runs the group's abort: NCCL communicators are aborted (ncclCommAbort), the message naming
// this rank and the collective goes to stderr, and the host channel ends every process of the job (MPI_Abort, or the
// abort file of the file rendezvous, which the other processes' waits watch). An exception that escapes main on one
// rank reaches std::terminate, whose handler (installed while a group of more than one process lives) aborts the
// same way, so the other ranks never wait for it.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace tandem::comm::detail {

class Watchdog {
 public:
  // What the watchdog does when an entry expires or fails: it receives the one-line reason and must not return.
  using OnFailure = std::function<void(const std::string& reason)>;
  // Polls an armed device entry: returns true once the work is complete (the entry is then removed); reports an
  // asynchronous failure by throwing tandem::Error (its message becomes part of the reason).
  using Poll = std::function<bool()>;

  Watchdog(std::chrono::milliseconds timeout, OnFailure on_failure);
  ~Watchdog();  // stops the thread; entries still armed are dropped
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Arms an entry for a blocking host call named `what` ("all_reduce #12 of 4096 bytes"); disarm it when the call
  // returns. An optional poll makes it a device entry that the watchdog removes itself once poll() returns true.
  uint64_t arm(std::string what, Poll poll = {});
  void disarm(uint64_t id);
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  void run();

  struct Entry {
    std::string what;
    std::chrono::steady_clock::time_point deadline;
    Poll poll;
  };
  const std::chrono::milliseconds timeout_;
  OnFailure on_failure_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::map<uint64_t, Entry> entries_;
  uint64_t next_id_ = 0;
  bool stopping_ = false;
  std::thread thread_;  // last: starts after everything above is initialized
};

// Arms an entry for the life of a scope (a blocking host call).
class Armed {
 public:
  Armed(Watchdog& watchdog, std::string what) : watchdog_(watchdog), id_(watchdog.arm(std::move(what))) {}
  ~Armed() { watchdog_.disarm(id_); }
  Armed(const Armed&) = delete;
  Armed& operator=(const Armed&) = delete;

 private:
  Watchdog& watchdog_;
  uint64_t id_;
};

}  // namespace tandem::comm::detail
