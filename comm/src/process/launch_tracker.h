#pragma once
// LaunchTracker: hands the device work that a process group issues to its watchdog's thread, with no lock, no
// allocation and no call into the watchdog per launch (Note [Watching launches]).

#include <atomic>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "watchdog.h"

namespace tandem::comm::detail {

// Note [Watching launches]: every collective that a group issues on its devices must finish within the timeout
// (Note [A distributed job never hangs]). The group's devices run its collectives in the order they were issued
// (Note [Group collective streams] in cuda/group_collectives.cpp), so once a launch is complete, so is every earlier
// one, and the watchdog needs only the newest launch at each of its checks:
//  - The launching thread fills a Launch (records its markers, e.g. one event per device, behind the collective)
//    and publishes it by swapping it into a one-slot mailbox. The Launch it swaps out, if any, was never seen by
//    the watchdog's thread; it becomes the spare that the next launch fills again. So back-to-back launches cost one
//    atomic exchange; the launching thread takes a Launch from the pool (under a lock the watchdog holds only to
//    give Launches back) at most once per check of the watchdog, after the watchdog emptied the mailbox.
//  - The watchdog's thread, at each check (poll), moves the mailbox's Launch to the back of its queue, gives the
//    complete Launches at the front back to the pool, and reports the front one left, with its issue time. A Launch
//    also stands for the launches it replaced in the mailbox, issued within the check interval before it; one of
//    them that never finishes is reported when the Launch is past its deadline: at most one check interval late,
//    as the watchdog's checks are anyway.
// Markers is the recorded state of one launch (movable); the tracker owns every Launch it creates until it is
// destroyed, so markers live as long as the tracker.
template <typename Markers>
class LaunchTracker {
 public:
  struct Launch {
    Markers markers;
    Watchdog::Clock::time_point issued{};
    const char* name = "";
    uint64_t number = 0;  // 1 for the first launch published
    uint64_t bytes = 0;
  };

  // make_markers creates the markers of a new Launch, when the pool is empty (on the launching thread).
  explicit LaunchTracker(std::function<Markers()> make_markers) : make_markers_(std::move(make_markers)) {}
  LaunchTracker(const LaunchTracker&) = delete;
  LaunchTracker& operator=(const LaunchTracker&) = delete;

  // ---- the launching side: one thread at a time (the caller serializes launches) ----

  // The Launch to fill next; the same one until it is published (a launch that throws before publishing leaves it
  // for the next).
  Launch& next() {
    if (spare_ == nullptr) spare_ = take();
    return *spare_;
  }
  // Publishes next() as launch number published() + 1, issued now, named "<name> #<number> of <bytes> bytes" (or
  // "<name> #<number>" for bytes 0: work that is not one collective, such as a graph's replay). `name` must be a
  // string literal (it is read on the watchdog's thread).
  const Launch& publish(const char* name, uint64_t bytes) {
    Launch* const launch = &next();
    launch->issued = Watchdog::Clock::now();
    launch->name = name;
    launch->number = ++published_;
    launch->bytes = bytes;
    spare_ = mailbox_.exchange(launch, std::memory_order_acq_rel);  // null when the watchdog took the previous one
    return *launch;
  }
  uint64_t published() const { return published_; }

  // ---- the watchdog's side: one thread ----

  // The oldest launch not known to be complete, or nullopt; complete(markers) queries a launch's markers (and may
  // throw, which the watchdog reports).
  template <typename Complete>
  std::optional<Watchdog::Pending> poll(Complete&& complete) {
    if (Launch* newest = mailbox_.exchange(nullptr, std::memory_order_acq_rel)) watched_.push_back(newest);
    while (!watched_.empty() && complete(std::as_const(watched_.front()->markers))) {
      give_back(watched_.front());
      watched_.pop_front();
    }
    if (watched_.empty()) return std::nullopt;
    const Launch& oldest = *watched_.front();
    std::string what = std::string(oldest.name) + " #" + std::to_string(oldest.number);
    if (oldest.bytes > 0) what += " of " + std::to_string(oldest.bytes) + " bytes";
    return Watchdog::Pending{oldest.issued, std::move(what)};
  }

 private:
  Launch* take() {
    {
      std::lock_guard lock(pool_mutex_);
      if (!pool_.empty()) {
        Launch* launch = pool_.back();
        pool_.pop_back();
        return launch;
      }
    }
    owned_.push_back(std::make_unique<Launch>(Launch{make_markers_()}));
    return owned_.back().get();
  }
  void give_back(Launch* launch) {
    std::lock_guard lock(pool_mutex_);
    pool_.push_back(launch);
  }

  std::function<Markers()> make_markers_;
  std::vector<std::unique_ptr<Launch>> owned_;  // launching side: every Launch created
  Launch* spare_ = nullptr;                     // launching side
  uint64_t published_ = 0;                      // launching side
  std::atomic<Launch*> mailbox_{nullptr};       // the newest published Launch the watchdog has not taken
  std::deque<Launch*> watched_;                 // watchdog side: taken, not known complete, oldest first
  std::mutex pool_mutex_;                       // guards pool_
  std::vector<Launch*> pool_;                   // complete Launches, free for the launching side
};

}  // namespace tandem::comm::detail
