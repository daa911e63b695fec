#include "launch_lanes.h"

#include <vector>

#include "tandem/core/cuda/context.h"

namespace tandem::comm::nccl {
namespace {

// Per device: the lane of its last launch (none yet: no wait) and the event that a lane change records. Guarded by
// the collective launch mutex (every caller holds a CollectiveLaunchLock); kept for the life of the process, like
// the streams it orders.
struct Lanes {
  std::vector<int> last;  // -1: no launch yet, else a Lane
  std::vector<cudaEvent_t> events;
};

Lanes& lanes() {
  static Lanes* const instance = new Lanes();
  return *instance;
}

cudaStream_t stream_of(Lane lane, int device) {
  return lane == Lane::Compute ? cuda::compute_stream(device) : cuda::comm_stream(device);
}

}  // namespace

bool enter_lane(const cuda::CollectiveLaunchLock& lock, int device, Lane lane) {
  (void)lock;
  Lanes& state = lanes();
  const auto index = static_cast<size_t>(device);
  if (index >= state.last.size()) {
    state.last.resize(index + 1, -1);
    state.events.resize(index + 1, nullptr);
  }
  int& last = state.last[index];
  if (last == -1 || last == static_cast<int>(lane)) {
    last = static_cast<int>(lane);
    return false;
  }
  cudaEvent_t& event = state.events[index];
  if (event == nullptr) {
    cuda::DeviceGuard guard(device);  // an event belongs to the device current at its creation
    TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  }
  TANDEM_CUDA_CHECK(cudaEventRecord(event, stream_of(static_cast<Lane>(last), device)));
  TANDEM_CUDA_CHECK(cudaStreamWaitEvent(stream_of(lane, device), event, 0));
  last = static_cast<int>(lane);  // only once the wait is enqueued: a failure leaves the lane as it was
  return true;
}

}  // namespace tandem::comm::nccl
