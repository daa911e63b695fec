// comm::broadcast: one copy of a tensor per device.

#include <algorithm>

#include "checks.h"
#include "comm_backend.h"
#include "tandem/comm/comm.h"
#include "tandem/core/grad_mode.h"

namespace tandem::comm {

std::vector<Tensor> broadcast(const Tensor& tensor, const std::vector<Device>& devices) {
  constexpr const char* fn = "comm::broadcast";
  detail::check_defined(tensor, fn, "tensor");
  detail::check_devices(devices, fn);
  NoGradGuard no_grad;

  const Device source = tensor.device();
  std::vector<Tensor> results(devices.size());
  std::vector<size_t> repeats;          // entries whose device appeared earlier in `devices` (not the source)
  std::vector<Tensor> targets;          // one new tensor per other distinct device
  std::vector<Device> participants = {source};
  for (size_t i = 0; i < devices.size(); ++i) {
    const auto first = std::find(devices.begin(), devices.begin() + static_cast<std::ptrdiff_t>(i), devices[i]);
    if (devices[i] == source) {
      results[i] = tensor;
    } else if (first != devices.begin() + static_cast<std::ptrdiff_t>(i)) {
      repeats.push_back(i);
    } else {
      results[i] = Tensor::empty(tensor.shape(), devices[i]);
      targets.push_back(results[i]);
      participants.push_back(devices[i]);
    }
  }
  if (!targets.empty() && tensor.numel() > 0) {
    detail::backend_for(participants).broadcast(tensor.contiguous(), targets);
  }
  // A device named twice gets two tensors that do not alias each other.
  for (size_t i : repeats) {
    const auto first = std::find(devices.begin(), devices.end(), devices[i]) - devices.begin();
    results[i] = results[static_cast<size_t>(first)].clone();
  }
  return results;
}

}  // namespace tandem::comm
