#include "tandem/parallel/data_parallel.h"

#include <string>
#include <utility>

#include "device_checks.h"
#include "scatter_each.h"
#include "tandem/core/error.h"
#include "tandem/parallel/parallel_apply.h"
#include "tandem/parallel/replicate.h"
#include "tandem/parallel/scatter_gather.h"

namespace tandem::parallel {

namespace {

// "input" when there is one, else "input j".
std::string input_name(size_t j, size_t count) { return count == 1 ? "input" : "input " + std::to_string(j); }

std::vector<Tensor> moved_to(std::vector<Tensor> tensors, Device device) {
  for (Tensor& tensor : tensors) tensor = tensor.to(device);
  return tensors;
}

}  // namespace

std::vector<Tensor> data_parallel(const std::shared_ptr<nn::Module>& module, const std::vector<Tensor>& inputs,
                                  std::vector<Device> devices, std::optional<Device> output_device, int64_t dim) {
  constexpr const char* fn = "parallel::data_parallel";
  TANDEM_CHECK(module != nullptr, fn, ": module is null");
  TANDEM_CHECK(!inputs.empty(), fn, ": got no inputs");
  for (size_t j = 0; j < inputs.size(); ++j)
    TANDEM_CHECK(inputs[j].defined(), fn, ": ", input_name(j, inputs.size()), " is undefined");
  if (devices.empty()) devices = default_devices();
  for (const Device& device : devices) check_device_available(device, fn);
  const Device destination = output_device.value_or(devices.front());
  check_device_available(destination, fn);
  detail::check_parameters_on(module->named_parameters(), devices.front(), fn, "devices[0]");

  if (devices.size() == 1) return moved_to(module->forward_all(moved_to(inputs, devices.front())), destination);
  std::vector<std::vector<Tensor>> chunks = detail::scatter_each(inputs, devices, dim, fn);
  devices.resize(chunks.size());  // a batch with fewer rows than devices leaves some devices without work
  if (devices.size() == 1) return moved_to(module->forward_all(chunks.front()), destination);

  const std::vector<std::shared_ptr<nn::Module>> replicas = replicate(module, devices);
  return detail::gather_each(parallel_apply(replicas, chunks, devices), destination, dim, fn);
}

Tensor data_parallel(const std::shared_ptr<nn::Module>& module, const Tensor& input, std::vector<Device> devices,
                     std::optional<Device> output_device, int64_t dim) {
  std::vector<Tensor> outputs =
      data_parallel(module, std::vector<Tensor>{input}, std::move(devices), output_device, dim);
  return nn::detail::single_output(*module, std::move(outputs), "parallel::data_parallel");
}

namespace {

std::shared_ptr<nn::Module> checked_module(std::shared_ptr<nn::Module> module) {
  TANDEM_CHECK(module != nullptr, "parallel::DataParallel: module is null");
  return module;
}

std::vector<Device> checked_devices(std::vector<Device> devices) {
  if (devices.empty()) devices = default_devices();
  for (const Device& device : devices) check_device_available(device, "parallel::DataParallel");
  return devices;
}

}  // namespace

DataParallel::DataParallel(std::shared_ptr<nn::Module> module, std::vector<Device> devices,
                           std::optional<Device> output_device, int64_t dim)
    : module_(checked_module(std::move(module))),
      devices_(checked_devices(std::move(devices))),
      output_device_(output_device.value_or(devices_.front())),
      dim_(dim) {
  check_device_available(output_device_, "parallel::DataParallel");
  register_module("module", module_);
}

Tensor DataParallel::forward(const Tensor& input) {
  return data_parallel(module_, input, devices_, output_device_, dim_);
}

std::vector<Tensor> DataParallel::forward_all(const std::vector<Tensor>& inputs) {
  return data_parallel(module_, inputs, devices_, output_device_, dim_);
}

std::string DataParallel::extra_repr() const {
  return "devices=" + to_string(devices_) + ", output_device=" + output_device_.str() + ", dim=" + std::to_string(dim_);
}

}  // namespace tandem::parallel
