// Built instead of src/cuda/group_collectives.cpp without CUDA: no group can drive a GPU then (the devices are
// checked to exist first), so this is never reached; it throws if it is.

#include "process/device_collectives.h"
#include "tandem/core/error.h"

namespace tandem::comm::detail {

std::unique_ptr<DeviceCollectives> make_nccl_collectives(HostChannel&, Watchdog&, const std::vector<Device>&) {
  TANDEM_FAIL("ProcessGroup: tandem was built without CUDA (configure with -DTANDEM_CUDA=ON)");
}

}  // namespace tandem::comm::detail
