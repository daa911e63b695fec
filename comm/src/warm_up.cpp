// comm::warm_up: the NCCL communicators of a device set, with tandem::warm_up's per-device state, created up front.

#include "tandem/core/warm_up.h"

#include <algorithm>

#include "comm_backend.h"
#include "tandem/comm/comm.h"

namespace tandem::comm {

void warm_up(const std::vector<Device>& devices) {
  for (const Device& device : devices) check_device_available(device, "comm::warm_up");
  check_distinct(devices, "comm::warm_up");
  tandem::warm_up(devices);
  const bool all_gpus = std::all_of(devices.begin(), devices.end(), [](const Device& d) { return d.is_cuda(); });
  if (all_gpus && devices.size() >= 2) detail::create_communicators(devices);
}

}  // namespace tandem::comm
