#include "tandem/core/stream_marker.h"

#include "backend.h"

namespace tandem {

StreamMarker StreamMarker::record(Device device) {
  check_device_available(device, "StreamMarker::record");
  if (device.is_cpu()) return StreamMarker(device, nullptr);  // see Note [Stream markers]
  return StreamMarker(device, backend::cuda_record_marker(device.index()));
}

bool StreamMarker::query() const { return event_ == nullptr || backend::cuda_marker_done(*event_); }

void StreamMarker::synchronize() const {
  if (event_ != nullptr) backend::cuda_marker_synchronize(*event_);
}

}  // namespace tandem
