// comm::reduce_add and comm::all_reduce: elementwise sums of one tensor per device; and reduce_lists, the list
// form of reduce_add, which reduce_add_coalesced shares.

#include "checks.h"
#include "comm_backend.h"
#include "lists.h"
#include "tandem/comm/comm.h"
#include "tandem/core/error.h"
#include "tandem/core/grad_mode.h"

namespace tandem::comm {
namespace detail {

std::vector<Tensor> reduce_lists(const std::vector<std::vector<Tensor>>& inputs, Device destination) {
  std::vector<Tensor> outputs;
  outputs.reserve(inputs.front().size());
  std::vector<std::vector<Tensor>> sources(inputs.size());  // the inputs that have elements, contiguous
  std::vector<Tensor> targets;                              // their sums
  for (size_t i = 0; i < inputs.front().size(); ++i) {
    outputs.push_back(Tensor::empty(inputs.front()[i].shape(), destination));
    if (outputs.back().numel() == 0) continue;
    targets.push_back(outputs.back());
    for (size_t d = 0; d < inputs.size(); ++d) sources[d].push_back(inputs[d][i].contiguous());
  }
  if (!targets.empty()) {
    std::vector<Device> participants;
    participants.reserve(sources.size());
    for (const std::vector<Tensor>& list : sources) participants.push_back(list.front().device());
    backend_for(participants).reduce(sources, targets);
  }
  return outputs;
}

}  // namespace detail

Tensor reduce_add(const std::vector<Tensor>& inputs, std::optional<Device> destination) {
  constexpr const char* fn = "comm::reduce_add";
  detail::check_one_per_device(inputs, fn, "input");
  const Device target = destination.value_or(inputs[0].device());
  check_device_available(target, fn);
  NoGradGuard no_grad;

  if (inputs.size() == 1) return inputs[0].device() == target ? inputs[0] : detail::copy_to(inputs[0], target);
  std::vector<std::vector<Tensor>> lists;  // one list of one tensor per device
  lists.reserve(inputs.size());
  for (const Tensor& input : inputs) lists.push_back({input});
  return detail::reduce_lists(lists, target).front();
}

void all_reduce(std::vector<Tensor>& tensors) {
  constexpr const char* fn = "comm::all_reduce";
  detail::check_one_per_device(tensors, fn, "tensor");
  if (tensors.size() == 1 || tensors[0].numel() == 0) return;
  NoGradGuard no_grad;

  std::vector<Tensor> buffers;  // the tensors themselves, or contiguous copies written back below
  buffers.reserve(tensors.size());
  for (const Tensor& t : tensors) buffers.push_back(t.contiguous());
  detail::backend_for(detail::devices_of(buffers)).all_reduce(buffers);
  for (size_t i = 0; i < tensors.size(); ++i) {
    if (!buffers[i].is_same(tensors[i])) tensors[i].copy_(buffers[i]);
  }
}

}  // namespace tandem::comm
