#include "checks.h"

#include "tandem/core/error.h"

namespace tandem::comm::detail {

void check_defined(const Tensor& tensor, const char* caller, const std::string& what) {
  TANDEM_CHECK(tensor.defined(), caller, ": ", what, " is undefined");
}

void check_devices(const std::vector<Device>& devices, const char* caller) {
  TANDEM_CHECK(!devices.empty(), caller, ": got an empty list of devices");
  for (const Device& device : devices) check_device_available(device, caller);
}

void check_one_per_device(const std::vector<Tensor>& tensors, const char* caller, const char* noun) {
  TANDEM_CHECK(!tensors.empty(), caller, ": got no ", noun, "s");
  for (size_t i = 0; i < tensors.size(); ++i) {
    check_defined(tensors[i], caller, std::string(noun) + " " + std::to_string(i));
    check_summable(tensors[i], caller, std::string(noun) + " " + std::to_string(i));
    TANDEM_CHECK(tensors[i].shape() == tensors[0].shape(), caller, ": ", noun, " ", i, " has shape ",
                 to_string(tensors[i].shape()), " but expected ", to_string(tensors[0].shape()));
  }
  check_distinct(devices_of(tensors), caller, std::string(noun) + "s");
}

void check_summable(const Tensor& tensor, const char* caller, const std::string& what) {
  TANDEM_CHECK(tensor.dtype() == DType::Float32, caller, ": ", what, " is ", tensor.dtype(),
               " but expected float32 (comm sums float32 tensors; convert with .to(DType::Float32))");
}

std::vector<Device> devices_of(const std::vector<Tensor>& tensors) {
  std::vector<Device> devices;
  devices.reserve(tensors.size());
  for (const Tensor& t : tensors) devices.push_back(t.device());
  return devices;
}

Tensor copy_to(const Tensor& tensor, Device device) {
  Tensor out = Tensor::empty(tensor.shape(), tensor.dtype(), device);
  out.copy_(tensor);
  return out;
}

}  // namespace tandem::comm::detail
