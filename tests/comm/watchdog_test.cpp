// The watchdog of process groups (comm/src/process/watchdog.h): expired and failed entries are reported with their
// name, completed and disarmed ones never are. The failure handler here records the reason and returns, where a
// group's ends the job.

#include "process/watchdog.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "support/test_support.h"

namespace tandem {
namespace {

using namespace std::chrono_literals;
using comm::detail::Armed;
using comm::detail::Watchdog;

class Reasons {
 public:
  Watchdog::OnFailure handler() {
    return [this](const std::string& reason) {
      std::lock_guard lock(mutex_);
      reasons_.push_back(reason);
      arrived_.notify_all();
    };
  }
  // The first reason, waiting up to `limit` for it; "" when none came.
  std::string first(std::chrono::milliseconds limit) {
    std::unique_lock lock(mutex_);
    arrived_.wait_for(lock, limit, [this] { return !reasons_.empty(); });
    return reasons_.empty() ? "" : reasons_.front();
  }
  size_t count() {
    std::lock_guard lock(mutex_);
    return reasons_.size();
  }

 private:
  std::mutex mutex_;
  std::condition_variable arrived_;
  std::vector<std::string> reasons_;
};

TEST(Watchdog, AnEntryPastItsDeadlineIsReportedOnceWithItsNameAndTheTimeout) {
  Reasons reasons;
  Watchdog watchdog(100ms, reasons.handler());
  const auto start = std::chrono::steady_clock::now();
  const uint64_t id = watchdog.arm("all_reduce #3 of 16 bytes");
  EXPECT_EQ(reasons.first(5s), "all_reduce #3 of 16 bytes did not finish within 100 ms");
  EXPECT_GE(std::chrono::steady_clock::now() - start, 100ms);
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(reasons.count(), 1u);  // the failed entry is gone
  watchdog.disarm(id);             // disarming it again is harmless
}

TEST(Watchdog, DisarmedEntriesAreNeverReported) {
  Reasons reasons;
  Watchdog watchdog(100ms, reasons.handler());
  for (int i = 0; i < 3; ++i) {
    Armed armed(watchdog, "barrier");
  }
  EXPECT_EQ(reasons.first(400ms), "");
  EXPECT_EQ(watchdog.timeout(), 100ms);
}

// A device watch whose oldest pending work keeps advancing (work completes as new work is issued) is never
// reported, however long it is watched; once it stops advancing it is, naming that work.
TEST(Watchdog, ADeviceWatchIsReportedOnlyWhenItsOldestPendingWorkIsPastTheTimeout) {
  Reasons reasons;
  Watchdog watchdog(500ms, reasons.handler());
  std::mutex mutex;
  Watchdog::Pending oldest{Watchdog::Clock::now(), "all_reduce #1 of 4 bytes"};
  std::atomic<int> polls{0};
  watchdog.watch("the NCCL collectives", [&]() -> std::optional<Watchdog::Pending> {
    ++polls;
    std::lock_guard lock(mutex);
    return oldest;
  });
  for (int i = 2; i <= 12; ++i) {  // 11 x 60 ms: past the timeout in all
    std::this_thread::sleep_for(60ms);
    std::lock_guard lock(mutex);
    oldest = {Watchdog::Clock::now(), "all_reduce #" + std::to_string(i) + " of 4 bytes"};
  }
  EXPECT_EQ(reasons.count(), 0u);
  EXPECT_GE(polls.load(), 5);
  EXPECT_EQ(reasons.first(5s), "all_reduce #12 of 4 bytes did not finish within 500 ms");
}

TEST(Watchdog, AnIdleDeviceWatchIsNeverReportedAndDisarmingItStopsItsPolls) {
  Reasons reasons;
  Watchdog watchdog(100ms, reasons.handler());
  std::atomic<int> polls{0};
  const uint64_t id = watchdog.watch("the NCCL collectives", [&]() -> std::optional<Watchdog::Pending> {
    ++polls;
    return std::nullopt;
  });
  EXPECT_EQ(reasons.first(400ms), "");
  EXPECT_GE(polls.load(), 2);
  watchdog.disarm(id);
  const int after_disarm = polls.load();
  std::this_thread::sleep_for(200ms);
  EXPECT_EQ(polls.load(), after_disarm);
}

TEST(Watchdog, ADeviceWatchThatThrowsIsReportedWithTheErrorBeforeTheDeadline) {
  Reasons reasons;
  Watchdog watchdog(10s, reasons.handler());
  watchdog.watch("the NCCL collectives",
                 []() -> std::optional<Watchdog::Pending> { TANDEM_FAIL("NCCL: remote process exited"); });
  EXPECT_EQ(testing::without_error_location(reasons.first(5s)),
            "the NCCL collectives failed: NCCL: remote process exited");
}

}  // namespace
}  // namespace tandem
