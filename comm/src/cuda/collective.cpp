#include "collective.h"

#include <algorithm>

#include "communicators.h"

namespace tandem::comm::nccl {

Collective::Collective(const std::vector<Tensor>& tensors) {
  devices_.reserve(tensors.size());
  for (const Tensor& t : tensors) devices_.push_back(t.device().index());
  std::sort(devices_.begin(), devices_.end());
  comms_ = &communicators(devices_);
}

bool Collective::has(const Device& device) const {
  return device.is_cuda() && std::binary_search(devices_.begin(), devices_.end(), device.index());
}

int Collective::rank_of(const Device& device) const {
  return static_cast<int>(std::lower_bound(devices_.begin(), devices_.end(), device.index()) - devices_.begin());
}

std::vector<void*> Collective::by_rank(const std::vector<Tensor>& tensors) const {
  std::vector<void*> buffers(devices_.size());
  for (const Tensor& t : tensors) buffers[static_cast<size_t>(rank_of(t.device()))] = t.mutable_data_ptr();
  return buffers;
}

}  // namespace tandem::comm::nccl
