// The CUDA side of StreamMarker (Note [Stream markers]): events recorded on the compute streams, pooled per device.

#include <cuda_runtime.h>

#include <mutex>
#include <vector>

#include "allocator.h"
#include "backend.h"
#include "tandem/core/cuda/context.h"

namespace tandem {

namespace detail {

struct MarkerEvent {
  int device;
  cudaEvent_t event;
};

}  // namespace detail

namespace {

// One device's events that no marker holds. Never destroyed, like the device contexts: markers may be dropped
// during static destruction.
struct EventPool {
  std::mutex mutex;
  std::vector<detail::MarkerEvent*> idle;
};

EventPool& pool_of(int device) {
  static const int count = alloc::cuda_visible_devices();
  static EventPool* const pools = new EventPool[count];
  // StreamMarker::record checks the device before it records a marker there.
  TANDEM_INTERNAL_ASSERT(device >= 0 && device < count, "StreamMarker::record: device cuda:", device,
                         " does not exist (", count, " CUDA devices visible)");
  return pools[device];
}

// Gives the event of a dropped marker back to its pool. A wait already enqueued on it keeps waiting for the record
// that preceded it, so recording the event again for a later marker cannot weaken that wait (as in Note [Reused
// events]). It runs when the last copy of a marker is destroyed, so nothing is thrown (Note [No throw on free
// paths]): a failure is reported and the event is left out of the pool.
void give_back(detail::MarkerEvent* marker) noexcept {
  static constinit detail::ReportOnce failures("StreamMarker: returning an event to its pool");
  failures.run([&] {
    EventPool& pool = pool_of(marker->device);
    std::lock_guard lock(pool.mutex);
    pool.idle.push_back(marker);
  });
}

}  // namespace

namespace backend {

std::shared_ptr<const detail::MarkerEvent> cuda_record_marker(int device) {
  EventPool& pool = pool_of(device);
  detail::MarkerEvent* marker = nullptr;
  {
    std::lock_guard lock(pool.mutex);
    if (!pool.idle.empty()) {
      marker = pool.idle.back();
      pool.idle.pop_back();
    }
  }
  if (marker == nullptr) {
    cuda::DeviceGuard guard(device);  // an event belongs to the device current when it is created
    cudaEvent_t event = nullptr;
    TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
    marker = new detail::MarkerEvent{device, event};
  }
  std::shared_ptr<const detail::MarkerEvent> recorded(marker, give_back);
  TANDEM_CUDA_CHECK(cudaEventRecord(marker->event, cuda::compute_stream(device)));
  return recorded;
}

bool cuda_marker_done(const detail::MarkerEvent& marker) {
  const cudaError_t status = cudaEventQuery(marker.event);
  if (status == cudaErrorNotReady) {
    (void)cudaGetLastError();  // not an error: the work is still running
    return false;
  }
  TANDEM_CUDA_CHECK(status);
  return true;
}

void cuda_marker_synchronize(const detail::MarkerEvent& marker) {
  TANDEM_CUDA_CHECK(cudaEventSynchronize(marker.event));
}

}  // namespace backend

namespace cuda {

cudaEvent_t marker_event(const StreamMarker& marker) {
  TANDEM_CHECK(marker.event() != nullptr, "cuda::marker_event: the marker on ", marker.device(),
               " holds no event");
  return marker.event()->event;
}

}  // namespace cuda
}  // namespace tandem
