#pragma once
// StreamMarker: a point in the work issued so far on one device, so that work on another stream can be ordered
// after that point without being ordered after everything issued on the device later.

#include <memory>

#include "tandem/core/device.h"

namespace tandem {

namespace detail {
struct MarkerEvent;  // what a backend records for a marker (a CUDA event); defined by the CUDA backend
}  // namespace detail

// Note [Stream markers]: work for a GPU is issued asynchronously on the device's compute stream. A marker recorded
// after some of it marks that point on the stream: a collective on the communication stream can wait for the marker
// and then overlap whatever the compute stream runs next (the rest of a backward pass), which waiting for the whole
// compute stream at issue time would not allow. On CUDA a marker is an event recorded on the compute stream, taken
// from a per-device pool and returned to it when the last copy of the marker is destroyed, so after warm-up no
// event is created. CPU work is finished when its call returns, so a CPU marker records nothing. Markers are cheap
// to copy and may be passed between threads.
class StreamMarker {
 public:
  StreamMarker() = default;  // marks nothing (on cpu:0)

  // Marks the work issued so far on `device`. Errors: a GPU that does not exist.
  static StreamMarker record(Device device);

  Device device() const { return device_; }
  // Whether the marked work has finished, asked without waiting (cudaEventQuery, as torch.cuda.Event.query); true on
  // a CPU device and for a default-constructed marker.
  bool query() const;
  // Blocks the host until the marked work has finished (as torch.cuda.Event.synchronize); returns at once on a CPU
  // device and for a default-constructed marker.
  void synchronize() const;
  // The backend's record: null on a CPU device (and for a default-constructed marker). The CUDA backends read the
  // event through cuda::marker_event (tandem/core/cuda/context.h).
  const detail::MarkerEvent* event() const { return event_.get(); }

 private:
  StreamMarker(Device device, std::shared_ptr<const detail::MarkerEvent> event)
      : device_(device), event_(std::move(event)) {}

  Device device_;
  std::shared_ptr<const detail::MarkerEvent> event_;
};

}  // namespace tandem
