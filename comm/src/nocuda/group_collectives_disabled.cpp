// Built instead of src/cuda/group_collectives.cpp when tandem is configured with TANDEM_CUDA=OFF: a process group over
// CUDA devices needs the CUDA build.

#include "process/device_collectives.h"
#include "tandem/core/error.h"

namespace tandem::comm::detail {

std::unique_ptr<DeviceCollectives> make_nccl_collectives(HostChannel&, Watchdog&, const std::vector<Device>&) {
  TANDEM_FAIL("comm::ProcessGroup: a group over CUDA devices needs tandem built with CUDA (configure with "
              "-DTANDEM_CUDA=ON)");
}

}  // namespace tandem::comm::detail
