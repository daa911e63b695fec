// LaunchTracker (comm/src/process/launch_tracker.h): the watchdog's side sees the oldest launch not yet complete, the
// launching side reuses its Launches instead of creating one per launch, and the two threads never share a Launch
// that is being filled. A fake device completes launches in order up to a number.

#include "process/launch_tracker.h"

#include <atomic>
#include <chrono>
#include <thread>

#include "support/test_support.h"

namespace tandem {
namespace {

using comm::detail::LaunchTracker;
using comm::detail::Watchdog;

// The markers of a fake launch: the number of the launch recorded in it, and whether the launching side is filling
// it right now.
struct FakeMarkers {
  std::atomic<uint64_t> recorded{0};
  std::atomic<bool> filling{false};
  FakeMarkers() = default;
  FakeMarkers(FakeMarkers&&) noexcept {}
};

class FakeDevice {
 public:
  LaunchTracker<FakeMarkers> tracker{[this] {
    ++created;
    return FakeMarkers{};
  }};
  std::atomic<int> created{0};
  std::atomic<uint64_t> done{0};    // launches complete up to this number
  std::atomic<bool> shared{false};  // the watchdog's side saw a Launch being filled

  // Fills and publishes one launch, as the group's collectives do.
  void launch(const char* name, uint64_t bytes) {
    FakeMarkers& markers = tracker.next().markers;
    markers.filling = true;
    markers.recorded = tracker.published() + 1;
    markers.filling = false;
    tracker.publish(name, bytes);
  }
  std::optional<Watchdog::Pending> poll() {
    return tracker.poll([this](const FakeMarkers& markers) {
      if (markers.filling) shared = true;
      return markers.recorded <= done;
    });
  }
};

TEST(LaunchTracker, NothingIsPendingBeforeTheFirstLaunchAndAfterTheLastCompletes) {
  FakeDevice device;
  EXPECT_FALSE(device.poll().has_value());
  device.launch("broadcast", 8);
  ASSERT_TRUE(device.poll().has_value());
  device.done = 1;
  EXPECT_FALSE(device.poll().has_value());
  EXPECT_FALSE(device.poll().has_value());
}

TEST(LaunchTracker, TheOldestLaunchSeenAndNotCompleteIsPendingWithItsNameAndIssueTime) {
  FakeDevice device;
  const auto before = Watchdog::Clock::now();
  device.launch("all_reduce", 16);
  std::optional<Watchdog::Pending> pending = device.poll();
  ASSERT_TRUE(pending.has_value());
  EXPECT_EQ(pending->what, "all_reduce #1 of 16 bytes");
  EXPECT_GE(pending->issued, before);
  EXPECT_LE(pending->issued, Watchdog::Clock::now());

  device.launch("all_gather", 32);
  EXPECT_EQ(device.poll()->what, "all_reduce #1 of 16 bytes");  // still the oldest
  device.done = 1;
  EXPECT_EQ(device.poll()->what, "all_gather #2 of 32 bytes");
  device.done = 2;
  EXPECT_FALSE(device.poll().has_value());
}

// A launch of no bytes is work that is not one collective (a graph's replay, ProcessGroup::watch_replay): its name
// carries only its number, in the same sequence as the collectives'.
TEST(LaunchTracker, ALaunchOfNoBytesIsNamedByItsNumberAlone) {
  FakeDevice device;
  device.launch("all_reduce", 16);
  device.launch("captured training step", 0);
  device.done = 1;
  EXPECT_EQ(device.poll()->what, "captured training step #2");
  device.done = 2;
  EXPECT_FALSE(device.poll().has_value());
}

// Launches published between two polls are watched through the newest of them, which completes last.
TEST(LaunchTracker, LaunchesBetweenTwoPollsAreWatchedThroughTheNewest) {
  FakeDevice device;
  for (int i = 0; i < 5; ++i) device.launch("reduce_scatter", 64);
  EXPECT_EQ(device.poll()->what, "reduce_scatter #5 of 64 bytes");
  device.done = 4;
  EXPECT_EQ(device.poll()->what, "reduce_scatter #5 of 64 bytes");
  device.done = 5;
  EXPECT_FALSE(device.poll().has_value());
  EXPECT_EQ(device.tracker.published(), 5u);
}

TEST(LaunchTracker, BackToBackLaunchesReuseTheirLaunchesInsteadOfCreatingOnePerLaunch) {
  FakeDevice device;
  for (int i = 0; i < 1000; ++i) device.launch("all_reduce", 4);
  EXPECT_EQ(device.created.load(), 2);  // the one in the mailbox and the spare
  for (int i = 0; i < 1000; ++i) {
    device.launch("all_reduce", 4);
    if (i % 10 == 0) {
      device.poll();
      device.done = device.tracker.published() - 1;
    }
  }
  EXPECT_LE(device.created.load(), 4);
}

TEST(LaunchTracker, ALaunchThatIsNotPublishedIsFilledAgainByTheNext) {
  FakeDevice device;
  auto* first = &device.tracker.next();
  EXPECT_EQ(&device.tracker.next(), first);  // as after a launch that threw before publishing
  device.launch("broadcast", 4);
  EXPECT_EQ(device.tracker.published(), 1u);
  EXPECT_EQ(device.created.load(), 1);
}

// The two sides on two threads, as the launching thread and the watchdog's: the watchdog's side never sees a Launch
// being filled, the oldest pending launch never goes back, and everything completes in the end.
TEST(LaunchTracker, TheTwoSidesOnTwoThreadsNeverShareALaunchBeingFilled) {
  FakeDevice device;
  constexpr uint64_t kLaunches = 200000;
  std::atomic<bool> finished{false};
  std::atomic<bool> seen{false};  // the watchdog's side has seen a pending launch
  std::thread launcher([&] {
    for (uint64_t i = 0; i < kLaunches; ++i) {
      device.launch("all_reduce", 4);
      if (i % 3 == 0) device.done = device.tracker.published() / 2;  // the device trails the host
    }
    // On a busy machine this thread can launch everything before the other polls once; the last launches stay
    // pending until the watchdog's side has seen one.
    while (!seen) std::this_thread::yield();
    device.done = kLaunches;
    finished = true;
  });
  uint64_t last_seen = 0;
  bool went_back = false;
  while (!finished) {
    if (std::optional<Watchdog::Pending> pending = device.poll()) {
      const uint64_t number = std::stoull(pending->what.substr(pending->what.find('#') + 1));
      went_back = went_back || number < last_seen;
      last_seen = number;
      seen = true;
    }
  }
  launcher.join();
  EXPECT_FALSE(device.poll().has_value());
  EXPECT_FALSE(went_back);
  EXPECT_FALSE(device.shared.load());
  EXPECT_GT(last_seen, 0u);
}

}  // namespace
}  // namespace tandem
