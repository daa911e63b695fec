// wait_for_devices on GPUs: a host wait for each device's compute and communication streams.

#include "process/device_wait.h"
#include "tandem/core/cuda/context.h"

namespace tandem::comm::detail {

void wait_for_devices(const std::vector<Device>& devices) {
  for (const Device& device : devices) {
    if (device.is_cuda()) cuda::synchronize(device.index());
  }
}

}  // namespace tandem::comm::detail
