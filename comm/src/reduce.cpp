// comm::reduce_add and comm::all_reduce: elementwise sums of one tensor per device.

#include "checks.h"
#include "comm_backend.h"
#include "tandem/comm/comm.h"
#include "tandem/core/error.h"
#include "tandem/core/grad_mode.h"

namespace tandem::comm {
namespace {

// One defined tensor per device, all of the shape of the first. `noun` names an entry in messages ("input 1").
void check_one_per_device(const std::vector<Tensor>& tensors, const char* fn, const char* noun) {
  TANDEM_CHECK(!tensors.empty(), fn, ": got no ", noun, "s");
  for (size_t i = 0; i < tensors.size(); ++i) {
    detail::check_defined(tensors[i], fn, noun + (" " + std::to_string(i)));
    TANDEM_CHECK(tensors[i].shape() == tensors[0].shape(), fn, ": ", noun, " ", i, " has shape ",
                 to_string(tensors[i].shape()), " but expected ", to_string(tensors[0].shape()));
  }
  detail::check_distinct(detail::devices_of(tensors), fn, noun);
}

}  // namespace

Tensor reduce_add(const std::vector<Tensor>& inputs, std::optional<Device> destination) {
  constexpr const char* fn = "comm::reduce_add";
  check_one_per_device(inputs, fn, "input");
  const Device target = destination.value_or(inputs[0].device());
  check_device_available(target, fn);
  NoGradGuard no_grad;

  if (inputs.size() == 1) return inputs[0].device() == target ? inputs[0] : detail::copy_to(inputs[0], target);
  Tensor output = Tensor::empty(inputs[0].shape(), target);
  if (output.numel() == 0) return output;
  std::vector<Tensor> sources;
  sources.reserve(inputs.size());
  for (const Tensor& input : inputs) sources.push_back(input.contiguous());
  detail::backend_for(detail::devices_of(sources)).reduce(sources, output);
  return output;
}

void all_reduce(std::vector<Tensor>& tensors) {
  constexpr const char* fn = "comm::all_reduce";
  check_one_per_device(tensors, fn, "tensor");
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
