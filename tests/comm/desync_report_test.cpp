// The desync report (comm/src/process/desync_report.h) from synthetic records of every rank: a rank that lags, in no
// collective or in an earlier one; the first mismatch of op or size; every rank at one place; ranks that did not
// answer. And CollectiveProgress / HostCall (collective_progress.h): the numbers, and what stays pending.

#include "process/desync_report.h"

#include <chrono>
#include <condition_variable>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include "process/collective_progress.h"
#include "support/test_support.h"

namespace tandem::comm::detail {
namespace {

using namespace std::chrono_literals;

// A rank that completed `completed` and is in `pending` (an empty record: none).
std::optional<RankProgress> at(CollectiveRecord completed, CollectiveRecord pending = {}) {
  return RankProgress{completed, pending};
}
CollectiveRecord call(uint64_t sequence, const char* op, uint64_t bytes = 0) {
  return CollectiveRecord::of(sequence, op, bytes);
}

TEST(DesyncReport, NamesARankInNoCollectiveAndWhereTheOthersWait) {
  const CollectiveRecord reduce = call(417, "all_reduce", 4194304);
  const CollectiveRecord gather = call(418, "all_gather", 8);
  EXPECT_EQ(desync_report({at(reduce, gather), at(reduce), at(reduce, gather)}),
            "rank 1 is in no collective, after all_reduce #417 of 4194304 bytes; ranks 0, 2 wait in all_gather #418 "
            "of 8 bytes");
}

TEST(DesyncReport, NamesARankStillInAnEarlierCollective) {
  const CollectiveRecord reduce = call(417, "all_reduce", 4194304);
  const CollectiveRecord gather = call(418, "all_gather", 8);
  EXPECT_EQ(desync_report({at(reduce, gather), at(reduce, gather), at(call(416, "barrier"), reduce)}),
            "rank 2 is at all_reduce #417 of 4194304 bytes; ranks 0, 1 wait in all_gather #418 of 8 bytes");
}

TEST(DesyncReport, OrdersSeveralLaggingPlacesFromTheFurthestBehind) {
  const CollectiveRecord first = call(1, "all_reduce", 16);
  const CollectiveRecord second = call(2, "barrier");
  EXPECT_EQ(desync_report({at(first, second), at({}), at(first)}),
            "rank 1 is in no collective and has completed none; rank 2 is in no collective, after all_reduce #1 of "
            "16 bytes; rank 0 waits in barrier #2");
}

TEST(DesyncReport, AnotherOpAtOneNumberIsAMismatch) {
  const CollectiveRecord first = call(1, "all_reduce", 16);
  EXPECT_EQ(desync_report({at(first, call(2, "all_reduce", 16)), at(first, call(2, "barrier")),
                           at(first, call(2, "all_reduce", 16))}),
            "mismatch at #2: all_reduce of 16 bytes on ranks 0, 2, barrier on rank 1");
}

// The first mismatch is named, from a completed record as well as a pending one; a later one is not.
TEST(DesyncReport, AnotherSizeAtOneNumberIsAMismatchAndTheFirstOneIsNamed) {
  EXPECT_EQ(desync_report({at(call(3, "all_reduce", 16), call(4, "broadcast", 8)),
                           at(call(3, "all_reduce", 32), call(4, "all_gather", 8))}),
            "mismatch at #3: all_reduce of 16 bytes on rank 0, all_reduce of 32 bytes on rank 1");
  EXPECT_EQ(desync_report({at(call(3, "all_reduce", 16)), at(call(2, "barrier"), call(3, "all_reduce", 32))}),
            "mismatch at #3: all_reduce of 16 bytes on rank 0, all_reduce of 32 bytes on rank 1");
}

TEST(DesyncReport, RanksAtOnePlaceAreEveryRank) {
  const CollectiveRecord first = call(4, "barrier");
  const CollectiveRecord second = call(5, "all_reduce", 16);
  EXPECT_EQ(desync_report({at(first, second), at(first, second), at(first, second)}),
            "every rank waits in all_reduce #5 of 16 bytes");
  EXPECT_EQ(desync_report({at(second), at(second)}), "every rank is in no collective, after all_reduce #5 of 16 bytes");
}

TEST(DesyncReport, NamesTheRanksThatDidNotAnswer) {
  const CollectiveRecord first = call(1, "all_reduce", 16);
  EXPECT_EQ(desync_report({at({}, first), at({}, first), std::nullopt, at({}, first)}),
            "ranks 0, 1, 3 wait in all_reduce #1 of 16 bytes; rank 2 did not answer");
  EXPECT_EQ(desync_report({at({}, first), std::nullopt, std::nullopt}),
            "rank 0 waits in all_reduce #1 of 16 bytes; ranks 1, 2 did not answer");
}

TEST(DesyncReport, OpNamesAreCutToTheirLimit) {
  const CollectiveRecord record = call(7, "an_op_name_longer_than_its_limit");
  EXPECT_EQ(record.describe(), "an_op_name_longer_than_ #7");
  EXPECT_EQ(call(3, "all_gather", 64).describe(), "all_gather #3 of 64 bytes");
}

TEST(CollectiveProgress, NumbersCollectivesFromOneAndKeepsTheLastCompletedAndThePending) {
  CollectiveProgress progress;
  EXPECT_TRUE(progress.snapshot().completed.empty());
  EXPECT_TRUE(progress.snapshot().pending.empty());
  EXPECT_EQ(progress.begin("all_reduce", 16), 1u);
  progress.complete();
  EXPECT_EQ(progress.begin("barrier", 0), 2u);
  const RankProgress now = progress.snapshot();
  EXPECT_EQ(now.completed.describe(), "all_reduce #1 of 16 bytes");
  EXPECT_EQ(now.pending.describe(), "barrier #2");
}

// The watchdog's handler here records the reason and returns, where a group's ends the job.
TEST(CollectiveProgress, AHostCallIsNamedByItsNumberAndStaysPendingWhenAnExceptionLeavesIt) {
  std::mutex mutex;
  std::condition_variable arrived;
  std::string reason;
  Watchdog watchdog(100ms, [&](const std::string& why) {
    std::lock_guard lock(mutex);
    reason = why;
    arrived.notify_all();
  });
  CollectiveProgress progress;
  { HostCall completes(progress, watchdog, "all_reduce", 16); }
  {
    HostCall late(progress, watchdog, "broadcast", 8);
    std::unique_lock lock(mutex);
    arrived.wait_for(lock, 5s, [&] { return !reason.empty(); });
  }
  EXPECT_EQ(reason, "broadcast #2 of 8 bytes did not finish within 100 ms");
  EXPECT_THROW(
      {
        HostCall fails(progress, watchdog, "exchange", 8, "the processes' exchange");
        throw std::runtime_error("the channel failed");
      },
      std::runtime_error);
  const RankProgress now = progress.snapshot();
  EXPECT_EQ(now.completed.describe(), "broadcast #2 of 8 bytes");
  EXPECT_EQ(now.pending.describe(), "exchange #3 of 8 bytes");
}

}  // namespace
}  // namespace tandem::comm::detail
