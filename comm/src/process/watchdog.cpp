// Watchdog: the thread that ends a job whose collective does not finish in time (Note [A distributed job never
// hangs] in watchdog.h).

#include "watchdog.h"

#include <exception>
#include <optional>
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

uint64_t Watchdog::arm(std::string what, Poll poll) {
  std::lock_guard lock(mutex_);
  const uint64_t id = next_id_++;
  entries_.emplace(id, Entry{std::move(what), std::chrono::steady_clock::now() + timeout_, std::move(poll)});
  return id;
}

void Watchdog::disarm(uint64_t id) {
  std::lock_guard lock(mutex_);
  entries_.erase(id);
}

// Polls run under the lock: they are quick queries (an event, NCCL's error state) and never arm or disarm. The
// failure handler runs without it, since it does not return in a real group; should it return (a test's handler),
// the failed entry is gone and watching goes on.
void Watchdog::run() {
  std::unique_lock lock(mutex_);
  while (!stopping_) {
    wake_.wait_for(lock, kCheckInterval, [this] { return stopping_; });
    if (stopping_) break;
    const auto now = std::chrono::steady_clock::now();
    std::optional<std::string> failure;
    for (auto it = entries_.begin(); it != entries_.end() && !failure;) {
      Entry& entry = it->second;
      if (entry.poll) {
        try {
          if (entry.poll()) {
            it = entries_.erase(it);
            continue;
          }
        } catch (const std::exception& e) {
          failure = entry.what + " failed: " + e.what();
        }
      }
      if (!failure && now >= entry.deadline) {
        failure = entry.what + " did not finish within " + std::to_string(timeout_.count()) + " ms";
      }
      if (failure) {
        it = entries_.erase(it);
      } else {
        ++it;
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
