// The differentiable communication primitives: Broadcast <-> ReduceAddCoalesced, Scatter <-> Gather.

#include "tandem/parallel/functions.h"

#include <algorithm>

#include "device_checks.h"
#include "tandem/core/error.h"

namespace tandem::parallel {

// ---- Broadcast ------------------------------------------------------------------------------------------------

Broadcast::Broadcast(std::vector<Device> devices, size_t buffer_size)
    : devices_(std::move(devices)), buffer_size_(buffer_size) {
  TANDEM_CHECK(!devices_.empty(), "parallel::Broadcast: got no devices");
  check_distinct(devices_, "parallel::Broadcast");
}

std::vector<Tensor> Broadcast::forward(const std::vector<Tensor>& inputs) {
  constexpr const char* fn = "parallel::Broadcast";
  if (inputs.empty()) return {};
  source_ = detail::common_device(inputs, fn, "input");
  // comm::broadcast_coalesced sends from its first device; put the source there, whether or not it is listed.
  std::vector<Device> targets{source_};
  for (const Device& device : devices_)
    if (device != source_) targets.push_back(device);
  const std::vector<std::vector<Tensor>> copies = comm::broadcast_coalesced(inputs, targets, buffer_size_);

  std::vector<Tensor> outputs;
  outputs.reserve(devices_.size() * inputs.size());
  for (const Device& device : devices_) {
    const size_t d = static_cast<size_t>(std::find(targets.begin(), targets.end(), device) - targets.begin());
    outputs.insert(outputs.end(), copies[d].begin(), copies[d].end());
  }
  return outputs;
}

std::vector<Tensor> Broadcast::backward(const std::vector<Tensor>& grad_outputs) {
  const size_t group_size = grad_outputs.size() / devices_.size();
  if (group_size == 0) return {};
  return ReduceAddCoalesced(source_, group_size, buffer_size_).forward(grad_outputs);
}

// ---- ReduceAddCoalesced ---------------------------------------------------------------------------------------

ReduceAddCoalesced::ReduceAddCoalesced(Device destination, size_t group_size, size_t buffer_size)
    : destination_(destination), group_size_(group_size), buffer_size_(buffer_size) {
  TANDEM_CHECK(group_size_ > 0, "parallel::ReduceAddCoalesced: group_size is 0 but expected > 0");
}

std::vector<Tensor> ReduceAddCoalesced::forward(const std::vector<Tensor>& inputs) {
  TANDEM_CHECK(!inputs.empty() && inputs.size() % group_size_ == 0, "parallel::ReduceAddCoalesced: got ",
               inputs.size(), " inputs but expected a positive multiple of ", group_size_, " (tensors per device)");
  std::vector<std::vector<Tensor>> lists;
  for (size_t start = 0; start < inputs.size(); start += group_size_)
    lists.emplace_back(inputs.begin() + static_cast<std::ptrdiff_t>(start),
                       inputs.begin() + static_cast<std::ptrdiff_t>(start + group_size_));
  std::vector<Tensor> sums = comm::reduce_add_coalesced(lists, destination_, buffer_size_);
  input_devices_.clear();
  for (const std::vector<Tensor>& list : lists) input_devices_.push_back(list.front().device());
  return sums;
}

std::vector<Tensor> ReduceAddCoalesced::backward(const std::vector<Tensor>& grad_outputs) {
  return Broadcast(input_devices_, buffer_size_).forward(grad_outputs);
}

// ---- Scatter --------------------------------------------------------------------------------------------------

Scatter::Scatter(std::vector<Device> devices, std::vector<int64_t> chunk_sizes, int64_t dim)
    : devices_(std::move(devices)), chunk_sizes_(std::move(chunk_sizes)), dim_(dim) {}

std::vector<Tensor> Scatter::forward(const std::vector<Tensor>& inputs) {
  TANDEM_CHECK(inputs.size() == 1, "parallel::Scatter: got ", inputs.size(), " inputs but expected 1");
  std::vector<Tensor> chunks = comm::scatter(inputs[0], devices_, chunk_sizes_, dim_);
  input_device_ = inputs[0].device();
  return chunks;
}

std::vector<Tensor> Scatter::backward(const std::vector<Tensor>& grad_outputs) {
  return Gather(input_device_, dim_).forward(grad_outputs);
}

// ---- Gather ---------------------------------------------------------------------------------------------------

Gather::Gather(Device destination, int64_t dim) : destination_(destination), dim_(dim) {}

std::vector<Tensor> Gather::forward(const std::vector<Tensor>& inputs) {
  Tensor output = comm::gather(inputs, dim_, destination_);  // validates the inputs
  wrapped_dim_ = wrap_dim(dim_, inputs.front().dim(), "parallel::Gather");
  input_devices_.clear();
  input_sizes_.clear();
  for (const Tensor& input : inputs) {
    input_devices_.push_back(input.device());
    input_sizes_.push_back(input.size(wrapped_dim_));
  }
  return {output};
}

std::vector<Tensor> Gather::backward(const std::vector<Tensor>& grad_outputs) {
  return Scatter(input_devices_, input_sizes_, wrapped_dim_).forward(grad_outputs);
}

}  // namespace tandem::parallel
