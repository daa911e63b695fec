#include "tandem/core/device.h"

#include <algorithm>
#include <cctype>
#include <charconv>

#include "allocator.h"
#include "tandem/core/error.h"

namespace tandem {

Device::Device(DeviceType type, int index) : type_(type), index_(index) {
  if (type == DeviceType::CPU) {
    TANDEM_CHECK(index >= 0 && index < kMaxCpuDevices, "Device: CPU device index ", index, " is out of range [0, ",
                 kMaxCpuDevices - 1, "]");
  } else {
    TANDEM_CHECK(index >= 0, "Device: CUDA device index ", index, " is negative");
  }
}

namespace {

std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  return text;
}

}  // namespace

Device Device::parse(std::string_view text) {
  const std::string_view body = trim(text);
  const size_t colon = body.find(':');
  const std::string_view kind = body.substr(0, colon);
  const auto fail = [&]() {
    TANDEM_FAIL("Device::parse: cannot parse '", excerpt(text), "'; expected 'cpu', 'cpu:N', 'cuda' or 'cuda:N'");
  };
  DeviceType type = DeviceType::CPU;
  if (kind == "cpu") {
    type = DeviceType::CPU;
  } else if (kind == "cuda") {
    type = DeviceType::CUDA;
  } else {
    fail();
  }
  if (colon == std::string_view::npos) return Device(type, 0);
  const std::string_view digits = body.substr(colon + 1);
  int index = 0;
  const auto [end, status] = std::from_chars(digits.data(), digits.data() + digits.size(), index);
  if (digits.empty() || status != std::errc() || end != digits.data() + digits.size()) fail();
  return Device(type, index);
}

std::string Device::str() const { return (is_cpu() ? "cpu:" : "cuda:") + std::to_string(index_); }

std::ostream& operator<<(std::ostream& os, const Device& device) { return os << device.str(); }

int cuda_device_count() { return alloc::cuda_visible_devices(); }

bool cuda_built() {
#if TANDEM_WITH_CUDA
  return true;
#else
  return false;
#endif
}

std::vector<Device> default_devices() {
  const int gpus = cuda_device_count();
  if (gpus == 0) return {Device::cpu(0), Device::cpu(1)};
  std::vector<Device> devices;
  for (int i = 0; i < gpus; ++i) devices.push_back(Device::cuda(i));
  return devices;
}

void check_device_available(const Device& device, std::string_view caller) {
  if (device.is_cpu()) return;
  const int gpus = cuda_device_count();
  TANDEM_CHECK(device.index() < gpus, caller, ": device ", device, " does not exist (", gpus, " CUDA device",
               gpus == 1 ? "" : "s", " visible", cuda_built() ? "" : "; tandem was built without CUDA", ")");
}

void check_distinct(const std::vector<Device>& devices, std::string_view caller, std::string_view items) {
  for (size_t j = 1; j < devices.size(); ++j) {
    for (size_t i = 0; i < j; ++i) {
      TANDEM_CHECK(devices[i] != devices[j], caller, ": device ", devices[j], " appears twice (", items, " ", i,
                   " and ", j, ") but expected distinct devices");
    }
  }
}

std::vector<Device> parse_devices(std::string_view text) {
  const std::string_view body = trim(text);
  if (body == "all") return default_devices();
  TANDEM_CHECK(!body.empty(),
               "parse_devices: empty device list; expected e.g. 'cuda:0,cuda:1', 'cpu:0,cpu:1' or 'all'");
  std::vector<Device> devices;
  size_t start = 0;
  while (start <= body.size()) {
    const size_t comma = std::min(body.find(',', start), body.size());
    const Device device = Device::parse(body.substr(start, comma - start));
    check_device_available(device, "parse_devices");
    devices.push_back(device);
    start = comma + 1;
  }
  check_distinct(devices, "parse_devices");
  return devices;
}

std::string to_string(const std::vector<Device>& devices) {
  std::string text = "[";
  for (size_t i = 0; i < devices.size(); ++i) text += (i > 0 ? ", " : "") + devices[i].str();
  return text + "]";
}

}  // namespace tandem
