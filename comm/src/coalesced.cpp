// comm::broadcast_coalesced and comm::reduce_add_coalesced: many tensors, one collective for all of them (one NCCL
// group of per-tensor operations on CUDA: no copies into or out of flat buffers).
//
// Note [Coalesced calls are one collective]: torch.cuda.comm packs the tensors into flat buckets of buffer_size bytes
// to bound its staging memory, and sends one bucket at a time. tandem stages nothing (every operation reads the input
// and writes the output tensor straight), so buckets would bound no memory, and sending them one after another cost
// a collective's start and drain per bucket (and a round trip through the communication streams, while collectives
// ran there): four 16 MiB tensors in buckets of their own took 1.2 times as long as one raw 64 MiB broadcast.
// So the whole list goes to the backend at once, and on CUDA NCCL receives all of it in one group (split only at its
// limit on the operations of a group, Collective::kMaxGroupOperations), which it schedules over its channels as one
// launch. buffer_size is accepted for compatibility and changes nothing.
#include "checks.h"
#include "lists.h"
#include "tandem/comm/comm.h"
#include "tandem/core/error.h"
#include "tandem/core/grad_mode.h"

namespace tandem::comm {

std::vector<std::vector<Tensor>> broadcast_coalesced(const std::vector<Tensor>& tensors,
                                                     const std::vector<Device>& devices, size_t /*buffer_size*/) {
  constexpr const char* fn = "comm::broadcast_coalesced";
  detail::check_devices(devices, fn);
  for (size_t i = 0; i < tensors.size(); ++i) {
    detail::check_defined(tensors[i], fn, "tensor " + std::to_string(i));
    TANDEM_CHECK(tensors[i].device() == devices[0], fn, ": tensor ", i, " is on ", tensors[i].device(),
                 " but expected ", devices[0], " (devices[0])");
  }
  NoGradGuard no_grad;

  return detail::broadcast_lists(tensors, devices);
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
                                         std::optional<Device> destination, size_t /*buffer_size*/) {
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
  return detail::reduce_lists(inputs, target);
}

}  // namespace tandem::comm
