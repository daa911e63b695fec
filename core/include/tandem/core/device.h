#pragma once
// Device: a small value type naming where a tensor lives. CPU devices are virtual: cpu:0 .. cpu:63 share host
// memory but are distinct devices for every API, so every multi-device code path also runs without a GPU.

#include <cstdint>
#include <functional>
#include <ostream>
#include <string>
#include <string_view>
#include <vector>

namespace tandem {

enum class DeviceType : uint8_t { CPU, CUDA };

class Device {
 public:
  static constexpr int kMaxCpuDevices = 64;

  // Validates the index: CPU 0..63, CUDA >= 0 (whether the GPU exists is checked where it is used, see
  // check_device_available, so a Device can name a GPU on a machine that has none).
  Device(DeviceType type, int index);
  Device() : Device(DeviceType::CPU, 0) {}

  static Device cpu(int index = 0) { return Device(DeviceType::CPU, index); }
  static Device cuda(int index = 0) { return Device(DeviceType::CUDA, index); }
  // "cpu", "cpu:1", "cuda", "cuda:0" (surrounding spaces allowed); throws Error on anything else.
  static Device parse(std::string_view text);

  DeviceType type() const { return type_; }
  int index() const { return index_; }
  bool is_cpu() const { return type_ == DeviceType::CPU; }
  bool is_cuda() const { return type_ == DeviceType::CUDA; }
  std::string str() const;

  friend bool operator==(const Device& a, const Device& b) { return a.type_ == b.type_ && a.index_ == b.index_; }
  friend bool operator!=(const Device& a, const Device& b) { return !(a == b); }
  friend bool operator<(const Device& a, const Device& b) {
    return a.type_ != b.type_ ? a.type_ < b.type_ : a.index_ < b.index_;
  }

 private:
  DeviceType type_;
  int index_;
};

std::ostream& operator<<(std::ostream& os, const Device& device);

// Number of visible GPUs; 0 when built without CUDA or when no GPU (or no driver) is present.
int cuda_device_count();
// Whether this build has the CUDA backend compiled in.
bool cuda_built();
// Every CUDA device; with none, the two virtual CPU devices cpu:0 and cpu:1.
std::vector<Device> default_devices();
// Parses "cuda:0,cuda:1", "cpu:0,cpu:1,cpu:2" or "all" (= default_devices()); every device must exist.
std::vector<Device> parse_devices(std::string_view text);
// Throws Error("<caller>: device cuda:7 does not exist (2 CUDA devices visible)") for a GPU that is not there.
void check_device_available(const Device& device, std::string_view caller);
// The one check that a list names each device at most once (device lists, and the devices of one-per-device
// tensors). Throws Error("<caller>: device cpu:1 appears twice (<items> 0 and 2) but expected distinct devices") for
// the first entry that repeats an earlier one; `items` names the entries in the plural ("entries", "inputs").
void check_distinct(const std::vector<Device>& devices, std::string_view caller, std::string_view items = "entries");
std::string to_string(const std::vector<Device>& devices);  // "[cuda:0, cuda:1]"
// Makes `device` the calling thread's current GPU (a no-op for CPU devices). Every op selects its device itself;
// a thread that works on one device (a parallel worker) calls this once so that those selections cost nothing.
void set_current_device(const Device& device);

}  // namespace tandem

template <>
struct std::hash<tandem::Device> {
  size_t operator()(const tandem::Device& d) const noexcept {
    return std::hash<int>()(static_cast<int>(d.type()) * 1024 + d.index());
  }
};
