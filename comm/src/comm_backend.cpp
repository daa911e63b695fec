#include "comm_backend.h"

#include <algorithm>

namespace tandem::comm::detail {

Backend& backend_for(const std::vector<Device>& participants) {
  const auto is_cuda = [](const Device& d) { return d.is_cuda(); };
  return std::all_of(participants.begin(), participants.end(), is_cuda) ? cuda_backend() : copy_backend();
}

}  // namespace tandem::comm::detail
