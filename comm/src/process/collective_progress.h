#pragma once
// CollectiveProgress: where a process of a group is in the group's sequence of collectives, for the report that ends
// a job whose collectives went out of step (Note [Desync reports]).
//
// Note [Desync reports]: every collective that a group of CPU devices runs over its host channel (all_reduce,
// broadcast, all_gather, reduce_scatter's all-reduce, barrier, exchange) takes the next number of the group's one
// sequence, 1 for the first, and its op name and size; the group's CollectiveProgress keeps this process's last
// completed and its pending collective (HostCall). Every process calls the same collectives in the same order, so the
// numbers agree until a process skips a collective, calls another one, or stops. When the group aborts (the watchdog
// found a collective past its deadline, an exception escaped, or ProcessGroup::abort), the aborting process asks every
// other process for its RankProgress through a side path of its host channel that no collective holds up
// (HostChannel::gather_progress: the rendezvous directory's progress files, or a duplicate of MPI_COMM_WORLD that a
// thread of each channel answers on), waits a bounded time, and appends the report of desync_report.h to its abort
// message: the first collective at which the processes disagree on op or size, else the processes that lag and the
// collective where the others wait ("rank 1 is in no collective, after all_reduce #3 of 16 bytes; ranks 0, 2 wait in
// barrier #4"), and the processes that did not answer. Groups on GPUs number their NCCL launches apart (the launch
// tracker's numbers), so their aborts carry no report yet.

#include <cstdint>
#include <exception>
#include <mutex>
#include <string>
#include <type_traits>

#include "watchdog.h"

namespace tandem::comm::detail {

// One collective of the sequence: its number (0: none), op name and bytes per process (0 where it has no payload, as
// a barrier). Trivially copyable: channels send it as bytes (native byte order, as the rest of the channels' data).
struct CollectiveRecord {
  static constexpr size_t kMaxOp = 23;
  uint64_t sequence = 0;
  uint64_t bytes = 0;
  char op[kMaxOp + 1] = {};  // NUL-terminated, truncated to kMaxOp characters

  static CollectiveRecord of(uint64_t sequence, const char* op, uint64_t bytes);
  bool empty() const { return sequence == 0; }
  // "all_reduce #3 of 16 bytes", "barrier #4" (bytes 0).
  std::string describe() const;
};

// Where one process is: the last collective it completed and the one it is in (empty when it is in none).
struct RankProgress {
  CollectiveRecord completed;
  CollectiveRecord pending;
};
static_assert(std::is_trivially_copyable_v<RankProgress>);

// This process's place in its group's sequence. Safe from any thread (the watchdog's and a channel's answering thread
// read it while a collective runs).
class CollectiveProgress {
 public:
  // Starts the next collective of the sequence; returns its number.
  uint64_t begin(const char* op, uint64_t bytes);
  // The pending collective completed.
  void complete();
  RankProgress snapshot() const;

 private:
  mutable std::mutex mutex_;
  RankProgress progress_;
};

// A blocking collective over the host channel, for the life of a scope: numbered in `progress` and armed on the
// watchdog as "<op> #<n> of <bytes> bytes" (or as `what`, when given). Completed when the scope ends normally; left
// pending when an exception leaves it (the report then shows where this process stopped).
class HostCall {
 public:
  HostCall(CollectiveProgress& progress, Watchdog& watchdog, const char* op, uint64_t bytes, std::string what = {});
  ~HostCall();
  HostCall(const HostCall&) = delete;
  HostCall& operator=(const HostCall&) = delete;

 private:
  CollectiveProgress& progress_;
  const int exceptions_ = std::uncaught_exceptions();
  Armed armed_;
};

}  // namespace tandem::comm::detail
