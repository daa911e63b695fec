// Watchdog: the thread that ends a job whose collective does not finish in time (Note [A distributed job never
// hangs] in watchdog.h).

#include "watchdog.h"

#include <exception>
#include <utility>

#include "tandem/core/error.h"

namespace tandem::comm::detail {
namespace {
constexpr auto kCheckInterval = std::chrono::milliseconds(50);
}  // namespace

Watchdog::Watchdog(std::chrono::milliseconds timeout, OnFailure on_failure)
    : timeout_(timeout), on_failure_(std::move(on_failure)), thread_([this] { run(); }) {}

Watchdog::~Watchdog() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

uint64_t Watchdog::arm(std::string what) {
  std::lock_guard lock(mutex_);
  const uint64_t id = next_id_++;
  entries_.emplace(id, Entry{std::move(what), Clock::now() + timeout_, {}});
  return id;
}

uint64_t Watchdog::watch(std::string what, Poll poll) {
  std::lock_guard lock(mutex_);
  const uint64_t id = next_id_++;
  entries_.emplace(id, Entry{std::move(what), {}, std::move(poll)});
  return id;
}

void Watchdog::disarm(uint64_t id) {
  std::lock_guard lock(mutex_);
  entries_.erase(id);
}

std::optional<std::string> Watchdog::check(Entry& entry, Clock::time_point now) {
  const auto late = [&](const std::string& what) {
    return what + " did not finish within " + std::to_string(timeout_.count()) + " ms";
  };
  if (!entry.poll) {
    if (now >= entry.deadline) return late(entry.what);
    return std::nullopt;
  }
  try {
    const std::optional<Pending> pending = entry.poll();
    if (pending && now >= pending->issued + timeout_) return late(pending->what);
  } catch (const std::exception& e) {
    return entry.what + " failed: " + e.what();
  }
  return std::nullopt;
}

// Polls run under the lock: they are quick queries (events, NCCL's error state) and never arm or disarm; so once
// disarm returns, its entry's poll has finished. The failure handler runs without the lock, since it does not return
// in a real group; should it return (a test's handler), the failed entry is gone and watching goes on.
void Watchdog::run() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, kCheckInterval, [this] { return stopping_; });
    if (stopping_) break;
    const auto now = Clock::now();
    std::optional<std::string> failure;
    for (auto it = entries_.begin(); it != entries_.end(); ++it) {
      failure = check(it->second, now);
      if (failure) {
        entries_.erase(it);
        break;
      }
    }
    if (failure) {
      lock.unlock();
      on_failure_(*failure);
      lock.lock();
    }
  }
}

}  // namespace tandem::comm::detail
