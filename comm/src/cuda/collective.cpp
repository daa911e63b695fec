#include "collective.h"

#include <algorithm>

#include "communicators.h"

namespace tandem::comm::nccl {

Collective::Collective(const std::vector<Device>& devices) {
  devices_.reserve(devices.size());
  for (const Device& device : devices) devices_.push_back(device.index());
  std::sort(devices_.begin(), devices_.end());
  comms_ = &communicators(devices_);
}

bool Collective::has(const Device& device) const {
  return device.is_cuda() && std::binary_search(devices_.begin(), devices_.end(), device.index());
}

int Collective::rank_of(const Device& device) const {
  return static_cast<int>(std::lower_bound(devices_.begin(), devices_.end(), device.index()) - devices_.begin());
}

}  // namespace tandem::comm::nccl
