// comm::broadcast: one copy of a tensor per device; and broadcast_lists, its list form, which broadcast_coalesced
// shares.

#include <algorithm>

#include "checks.h"
#include "comm_backend.h"
#include "lists.h"
#include "tandem/comm/comm.h"
#include "tandem/core/grad_mode.h"

namespace tandem::comm {

namespace detail {

std::vector<std::vector<Tensor>> broadcast_lists(const std::vector<Tensor>& tensors,
                                                 const std::vector<Device>& devices) {
  std::vector<std::vector<Tensor>> results(devices.size());
  if (tensors.empty()) return results;
  const Device source = tensors.front().device();
  // Note [Broadcast by dtype]: the backends' broadcast (NCCL on CUDA) moves float32 elements, so tensors of other
  // dtypes (labels, indices) go to each device as plain copies instead, which move bytes.
  std::vector<Tensor> sources;               // the float32 tensors that have elements, contiguous
  std::vector<std::vector<Tensor>> targets;  // their new copies, one list per other distinct device
  std::vector<Tensor> copy_sources;          // the other tensors that have elements, once per target ...
  std::vector<Tensor> copy_targets;          // ... and their new copies
  std::vector<Device> participants = {source};
  std::vector<size_t> repeats;  // entries whose device appeared earlier in `devices` (not the source)
  for (const Tensor& t : tensors) {
    if (t.numel() > 0 && t.dtype() == DType::Float32) sources.push_back(t.contiguous());
  }
  for (size_t d = 0; d < devices.size(); ++d) {
    const auto earlier = devices.begin() + static_cast<std::ptrdiff_t>(d);
    if (devices[d] == source) {
      results[d] = tensors;
    } else if (std::find(devices.begin(), earlier, devices[d]) != earlier) {
      repeats.push_back(d);
    } else {
      targets.emplace_back();
      for (const Tensor& t : tensors) {
        results[d].push_back(Tensor::empty(t.shape(), t.dtype(), devices[d]));
        if (t.numel() == 0) continue;
        if (t.dtype() == DType::Float32) {
          targets.back().push_back(results[d].back());
        } else {
          copy_sources.push_back(t.contiguous());
          copy_targets.push_back(results[d].back());
        }
      }
      participants.push_back(devices[d]);
    }
  }
  if (!targets.empty() && !sources.empty()) backend_for(participants).broadcast(sources, targets);
  if (!copy_targets.empty()) backend_for(participants).copy(copy_sources, copy_targets);
  // A device named twice gets tensors that do not alias the first ones.
  for (size_t d : repeats) {
    const auto first = static_cast<size_t>(std::find(devices.begin(), devices.end(), devices[d]) - devices.begin());
    for (const Tensor& t : results[first]) results[d].push_back(t.clone());
  }
  return results;
}

}  // namespace detail

std::vector<Tensor> broadcast(const Tensor& tensor, const std::vector<Device>& devices) {
  constexpr const char* fn = "comm::broadcast";
  detail::check_defined(tensor, fn, "tensor");
  detail::check_devices(devices, fn);
  NoGradGuard no_grad;

  std::vector<Tensor> results;
  results.reserve(devices.size());
  for (std::vector<Tensor>& copies : detail::broadcast_lists({tensor}, devices)) {
    results.push_back(std::move(copies.front()));
  }
  return results;
}

}  // namespace tandem::comm
