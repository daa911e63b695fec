#include "tandem/parallel/data_parallel.h"

#include "device_checks.h"
#include "tandem/core/error.h"
#include "tandem/parallel/parallel_apply.h"
#include "tandem/parallel/replicate.h"
#include "tandem/parallel/scatter_gather.h"

namespace tandem::parallel {

Tensor data_parallel(const std::shared_ptr<nn::Module>& module, const Tensor& input, std::vector<Device> devices,
                     std::optional<Device> output_device, int64_t dim) {
  constexpr const char* fn = "parallel::data_parallel";
  TANDEM_CHECK(module != nullptr, fn, ": module is null");
  TANDEM_CHECK(input.defined(), fn, ": input is undefined");
  if (devices.empty()) devices = default_devices();
  for (const Device& device : devices) check_device_available(device, fn);
  const Device destination = output_device.value_or(devices.front());
  check_device_available(destination, fn);
  detail::check_parameters_on(module->named_parameters(), devices.front(), fn, "devices[0]");

  if (devices.size() == 1) return module->forward(input.to(devices.front())).to(destination);
  std::vector<Tensor> inputs = scatter(input, devices, {}, dim);
  devices.resize(inputs.size());  // a batch with fewer rows than devices leaves some devices without work
  if (devices.size() == 1) return module->forward(inputs.front()).to(destination);

  const std::vector<std::shared_ptr<nn::Module>> replicas = replicate(module, devices);
  return gather(parallel_apply(replicas, inputs, devices), destination, dim);
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

std::string DataParallel::extra_repr() const {
  return "devices=" + to_string(devices_) + ", output_device=" + output_device_.str() +
         ", dim=" + std::to_string(dim_);
}

}  // namespace tandem::parallel
