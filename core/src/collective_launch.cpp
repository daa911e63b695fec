// The collective launch mutex and the thread's "inside a collective launch" flag (Note [No device allocation during
// a collective launch]).

#include "tandem/core/cuda/collective_launch.h"

#include "tandem/core/error.h"

namespace tandem::cuda {
namespace {

std::mutex& collective_launch_mutex() {
  static std::mutex mutex;
  return mutex;
}

thread_local bool launching = false;

}  // namespace

CollectiveLaunchLock::CollectiveLaunchLock() {
  assert_not_launching_collective("cuda::CollectiveLaunchLock", "launching another collective");
  lock_ = std::unique_lock(collective_launch_mutex());
  launching = true;
}

CollectiveLaunchLock::~CollectiveLaunchLock() { launching = false; }

CollectiveLaunchExclusion::CollectiveLaunchExclusion() {
  assert_not_launching_collective("cuda::CollectiveLaunchExclusion", "waiting for the collective launch lock");
  lock_ = std::unique_lock(collective_launch_mutex());
}

bool inside_collective_launch() noexcept { return launching; }

void assert_not_launching_collective(const char* caller, const char* action) {
  TANDEM_INTERNAL_ASSERT(!launching, caller, ": ", action,
                         " while this thread launches a collective (see Note [No device allocation during a "
                         "collective launch])");
}

}  // namespace tandem::cuda
