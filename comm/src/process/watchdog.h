#pragma once
// Note [A distributed job never hangs]: a process of a distributed job can wait forever on others: in an MPI call,
// in a rendezvous, or on the GPU in an NCCL kernel whose peers never arrive (one rank threw, or is stuck). No such
// wait is allowed to last. Every blocking host call of a group and every collective issued on a device is armed with
// a deadline (ProcessGroupOptions::timeout) on the group's Watchdog; a watchdog thread checks the armed entries a few
// times a second. When one is past its deadline, or a device entry's poll reports an error (NCCL's asynchronous
// error), the watchdog runs the group's abort: NCCL communicators are aborted (ncclCommAbort), the message naming
// this rank and the collective goes to stderr (on CPU devices followed by where every process is in the group's
// sequence of collectives: Note [Desync reports] in collective_progress.h), and the host channel ends every process of
// the job (MPI_Abort, or the abort file of the file rendezvous, which the other processes' waits watch). An exception
// that escapes main on one rank reaches std::terminate, whose handler (installed while a group of more than one process
// lives) aborts the same way, so the other ranks never wait for it.

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace tandem::comm::detail {

class Watchdog {
 public:
  using Clock = std::chrono::steady_clock;
  // What the watchdog does when an entry expires or fails: it receives the one-line reason and must not return.
  using OnFailure = std::function<void(const std::string& reason)>;
  // The oldest work of a device watch that is not known to be complete: when it was issued, and its name
  // ("all_reduce #12 of 4096 bytes").
  struct Pending {
    Clock::time_point issued;
    std::string what;
  };
  // Polls a device watch, on the watchdog's thread only: the oldest pending work, or nullopt when everything issued
  // so far is complete. Reports an asynchronous failure by throwing tandem::Error (its message becomes part of the
  // reason). Must be quick (it runs under the watchdog's lock) and must not arm or disarm.
  using Poll = std::function<std::optional<Pending>()>;

  Watchdog(std::chrono::milliseconds timeout, OnFailure on_failure);
  ~Watchdog();  // stops the thread; entries still armed are dropped
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Arms an entry for a blocking host call named `what` ("barrier"), due within timeout(); disarm it when the call
  // returns.
  uint64_t arm(std::string what);
  // Arms a device watch named `what` that stays until disarmed: at every check the watchdog polls it and reports
  // it when its oldest pending work was issued more than timeout() ago ("<pending.what> did not finish within ...")
  // or when the poll throws ("<what> failed: <message>"). Issuing work costs the watched side nothing here: it
  // hands its work to the poll itself (launch_tracker.h).
  uint64_t watch(std::string what, Poll poll);
  // Removes an entry. Once it returns, the entry's poll is not running and never runs again. Unknown ids (an entry
  // already reported) are ignored.
  void disarm(uint64_t id);
  std::chrono::milliseconds timeout() const { return timeout_; }

 private:
  struct Entry {
    std::string what;
    Clock::time_point deadline;  // host entries only
    Poll poll;                   // device watches only
  };

  void run();
  // The reason to report for `entry` at `now`, if any.
  std::optional<std::string> check(Entry& entry, Clock::time_point now);
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
