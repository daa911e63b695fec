#include "collective.h"

#include <algorithm>
#include <utility>

#include "comm_backend.h"
#include "communicators.h"

namespace tandem::comm::nccl {

Collective::Collective(const std::vector<Device>& devices) {
  devices_.reserve(devices.size());
  for (const Device& device : devices) devices_.push_back(device.index());
  std::sort(devices_.begin(), devices_.end());
  comms_ = &communicators(devices_);
}

Collective::Collective(std::vector<int> devices, const std::vector<ncclComm_t>& comms)
    : devices_(std::move(devices)), comms_(&comms) {}

// A linear search: a collective has a handful of local ranks, and the devices of a process group's are in the group's
// order, not sorted.
bool Collective::has(const Device& device) const {
  return device.is_cuda() && std::find(devices_.begin(), devices_.end(), device.index()) != devices_.end();
}

int Collective::rank_of(const Device& device) const {
  return static_cast<int>(std::find(devices_.begin(), devices_.end(), device.index()) - devices_.begin());
}

}  // namespace tandem::comm::nccl

namespace tandem::comm::detail {

void create_communicators(const std::vector<Device>& devices) { (void)nccl::Collective(devices); }

}  // namespace tandem::comm::detail
