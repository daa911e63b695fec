// The collective launch lock and the thread's "inside a collective launch" flag (Note [No device allocation during a
// collective launch]): built without CUDA too, so the rule is tested on every machine; what the caching allocator
// does with it is tested in cuda_allocator_test.cpp.

#include "tandem/core/cuda/collective_launch.h"

#include <thread>

#include "support/test_support.h"

namespace tandem {
namespace {

using cuda::CollectiveLaunchExclusion;
using cuda::CollectiveLaunchLock;
using cuda::inside_collective_launch;

TEST(CollectiveLaunch, TheLockMarksOnlyItsOwnThreadWhileItIsHeld) {
  EXPECT_FALSE(inside_collective_launch());
  {
    CollectiveLaunchLock lock;
    EXPECT_TRUE(inside_collective_launch());
    bool other_thread_inside = true;
    std::thread([&] { other_thread_inside = inside_collective_launch(); }).join();
    EXPECT_FALSE(other_thread_inside);
  }
  EXPECT_FALSE(inside_collective_launch());
}

TEST(CollectiveLaunch, TheExclusionDoesNotMarkTheThread) {
  CollectiveLaunchExclusion exclusion;
  EXPECT_FALSE(inside_collective_launch());
  EXPECT_NO_THROW(cuda::assert_not_launching_collective("alloc::cuda_empty_cache", "releasing device memory"));
}

TEST(CollectiveLaunch, AllocatingDuringALaunchIsAnInternalError) {
  EXPECT_NO_THROW(cuda::assert_not_launching_collective("alloc::cuda_allocate", "allocating device memory"));
  CollectiveLaunchLock lock;
  try {
    cuda::assert_not_launching_collective("alloc::cuda_allocate", "allocating device memory");
    ADD_FAILURE() << "no InternalError";
  } catch (const InternalError& e) {
    EXPECT_NE(std::string(e.what()).find("alloc::cuda_allocate: allocating device memory while this thread launches "
                                         "a collective"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("this is a bug in tandem"), std::string::npos) << e.what();
  }
}

// The launch mutex is not recursive: taking it again on the launching thread would hang; it is an error instead.
TEST(CollectiveLaunch, TakingTheMutexAgainDuringALaunchIsAnInternalErrorNotAHang) {
  CollectiveLaunchLock lock;
  EXPECT_ERROR(CollectiveLaunchLock nested,
               "cuda::CollectiveLaunchLock: launching another collective while this thread launches a collective");
  EXPECT_ERROR(CollectiveLaunchExclusion exclusion,
               "cuda::CollectiveLaunchExclusion: waiting for the collective launch lock while this thread launches "
               "a collective");
  EXPECT_TRUE(inside_collective_launch());  // the failed attempts left the launch as it was
}

TEST(CollectiveLaunch, TheFlagIsClearedWhenALaunchThrows) {
  try {
    CollectiveLaunchLock lock;
    TANDEM_FAIL("comm: a launch failed");
  } catch (const Error&) {
  }
  EXPECT_FALSE(inside_collective_launch());
  CollectiveLaunchExclusion exclusion;  // and the mutex was released
  EXPECT_FALSE(inside_collective_launch());
}

}  // namespace
}  // namespace tandem
