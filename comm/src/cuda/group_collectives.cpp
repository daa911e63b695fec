// Placeholder until the NCCL group collectives land: a group of several processes on GPUs is refused.

#include "process/device_collectives.h"
#include "tandem/core/error.h"

namespace tandem::comm::detail {

std::unique_ptr<DeviceCollectives> make_nccl_collectives(HostChannel& channel, Watchdog& watchdog,
                                                         const std::vector<Device>& devices) {
  TANDEM_FAIL("ProcessGroup: collectives over GPUs of several processes (", to_string(devices), " on each of ",
              channel.size(), " processes) are not built yet");
}

}  // namespace tandem::comm::detail
