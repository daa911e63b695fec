// CollectiveProgress and HostCall (Note [Desync reports] in collective_progress.h).

#include "collective_progress.h"

#include <algorithm>
#include <cstring>
#include <utility>

namespace tandem::comm::detail {
namespace {

// Begins the collective in `progress` and names it for the watchdog.
std::string begin_named(CollectiveProgress& progress, const char* op, uint64_t bytes, std::string what) {
  const uint64_t sequence = progress.begin(op, bytes);
  return what.empty() ? CollectiveRecord::of(sequence, op, bytes).describe() : std::move(what);
}

}  // namespace

CollectiveRecord CollectiveRecord::of(uint64_t sequence, const char* op, uint64_t bytes) {
  CollectiveRecord record;
  record.sequence = sequence;
  record.bytes = bytes;
  std::strncpy(record.op, op, kMaxOp);
  return record;
}

std::string CollectiveRecord::describe() const {
  const std::string name = std::string(op, strnlen(op, kMaxOp)) + " #" + std::to_string(sequence);
  return bytes == 0 ? name : name + " of " + std::to_string(bytes) + " bytes";
}

uint64_t CollectiveProgress::begin(const char* op, uint64_t bytes) {
  std::lock_guard lock(mutex_);
  const uint64_t sequence = std::max(progress_.completed.sequence, progress_.pending.sequence) + 1;
  progress_.pending = CollectiveRecord::of(sequence, op, bytes);
  return sequence;
}

void CollectiveProgress::complete() {
  std::lock_guard lock(mutex_);
  progress_.completed = progress_.pending;
  progress_.pending = {};
}

RankProgress CollectiveProgress::snapshot() const {
  std::lock_guard lock(mutex_);
  return progress_;
}

HostCall::HostCall(CollectiveProgress& progress, Watchdog& watchdog, const char* op, uint64_t bytes, std::string what)
    : progress_(progress), armed_(watchdog, begin_named(progress, op, bytes, std::move(what))) {}

HostCall::~HostCall() {
  if (std::uncaught_exceptions() == exceptions_) progress_.complete();
}

}  // namespace tandem::comm::detail
