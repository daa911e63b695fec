// comm::broadcast_coalesced and comm::reduce_add_coalesced: many tensors, one collective per bucket (one NCCL group
// of per-tensor operations on CUDA: no copies into or out of flat buffers).

#include "buckets.h"
#include "checks.h"
#include "lists.h"
#include "tandem/comm/comm.h"
#include "tandem/core/error.h"
#include "tandem/core/grad_mode.h"

namespace tandem::comm {

std::vector<std::vector<Tensor>> broadcast_coalesced(const std::vector<Tensor>& tensors,
                                                     const std::vector<Device>& devices, size_t buffer_size) {
  constexpr const char* fn = "comm::broadcast_coalesced";
  detail::check_devices(devices, fn);
  for (size_t i = 0; i < tensors.size(); ++i) {
    detail::check_defined(tensors[i], fn, "tensor " + std::to_string(i));
    TANDEM_CHECK(tensors[i].device() == devices[0], fn, ": tensor ", i, " is on ", tensors[i].device(),
                 " but expected ", devices[0], " (devices[0])");
  }
  NoGradGuard no_grad;

  std::vector<std::vector<Tensor>> results(devices.size());
  for (std::vector<Tensor>& list : results) list.reserve(tensors.size());
  for (const detail::Bucket& bucket : detail::make_buckets(tensors, buffer_size)) {
    const std::vector<Tensor> members(tensors.begin() + static_cast<std::ptrdiff_t>(bucket.begin),
                                      tensors.begin() + static_cast<std::ptrdiff_t>(bucket.end));
    std::vector<std::vector<Tensor>> copies = detail::broadcast_lists(members, devices);
    for (size_t d = 0; d < devices.size(); ++d) {
      for (Tensor& copy : copies[d]) results[d].push_back(std::move(copy));
    }
  }
  return results;
}

namespace {

// Checks that inputs[d] are lists of equal length, shapes matching inputs[0] position by position, each list on one
// device and no two lists on the same device.
void check_lists(const std::vector<std::vector<Tensor>>& inputs, const char* fn) {
  TANDEM_CHECK(!inputs.empty(), fn, ": got no input lists");
  const std::vector<Tensor>& reference = inputs[0];
  for (size_t d = 0; d < inputs.size(); ++d) {
    TANDEM_CHECK(inputs[d].size() == reference.size(), fn, ": list ", d, " has ", inputs[d].size(),
                 " tensors but expected ", reference.size());
    for (size_t i = 0; i < inputs[d].size(); ++i) {
      const Tensor& t = inputs[d][i];
      detail::check_defined(t, fn, "tensor " + std::to_string(i) + " of list " + std::to_string(d));
      detail::check_summable(t, fn, "tensor " + std::to_string(i) + " of list " + std::to_string(d));
      TANDEM_CHECK(t.shape() == reference[i].shape(), fn, ": tensor ", i, " of list ", d, " has shape ",
                   to_string(t.shape()), " but expected ", to_string(reference[i].shape()));
      TANDEM_CHECK(t.device() == inputs[d][0].device(), fn, ": tensor ", i, " of list ", d, " is on ", t.device(),
                   " but expected ", inputs[d][0].device(), " (the device of its list)");
    }
  }
  if (reference.empty()) return;
  std::vector<Device> list_devices;
  for (const std::vector<Tensor>& list : inputs) list_devices.push_back(list[0].device());
  check_distinct(list_devices, fn, "lists");
}

}  // namespace

std::vector<Tensor> reduce_add_coalesced(const std::vector<std::vector<Tensor>>& inputs,
                                         std::optional<Device> destination, size_t buffer_size) {
  constexpr const char* fn = "comm::reduce_add_coalesced";
  check_lists(inputs, fn);
  const std::vector<Tensor>& reference = inputs[0];
  if (reference.empty()) return {};
  const Device target = destination.value_or(reference[0].device());
  check_device_available(target, fn);
  NoGradGuard no_grad;

  std::vector<Tensor> results;
  results.reserve(reference.size());
  if (inputs.size() == 1) {  // like reduce_add of one input: the tensor itself when it is on the destination
    for (const Tensor& t : reference) results.push_back(t.device() == target ? t : detail::copy_to(t, target));
    return results;
  }
  for (const detail::Bucket& bucket : detail::make_buckets(reference, buffer_size)) {
    std::vector<std::vector<Tensor>> lists;  // the bucket's part of every input list
    lists.reserve(inputs.size());
    for (const std::vector<Tensor>& list : inputs) {
      lists.emplace_back(list.begin() + static_cast<std::ptrdiff_t>(bucket.begin),
                         list.begin() + static_cast<std::ptrdiff_t>(bucket.end));
    }
    for (Tensor& sum : detail::reduce_lists(lists, target)) results.push_back(std::move(sum));
  }
  return results;
}

}  // namespace tandem::comm
