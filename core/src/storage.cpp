#include "tandem/core/storage.h"

#include "allocator.h"
#include "tandem/core/error.h"

namespace tandem {

Storage::Storage(Device device, size_t nbytes) : Storage(device, nbytes, /*pinned=*/false) {}

Storage::Storage(Device device, size_t nbytes, bool pinned, const char* caller)
    : device_(device), nbytes_(nbytes), pinned_(pinned), data_(nullptr) {
  if (pinned) {
    TANDEM_CHECK(device.is_cpu(), caller, ": page-locked memory is host memory but the device is ", device,
                 "; expected a CPU device");
    const char* const missing =
        cuda_built() ? "no CUDA device is visible" : "tandem was built without CUDA (configure with -DTANDEM_CUDA=ON)";
    TANDEM_CHECK(cuda_device_count() > 0, caller, ": page-locked memory needs a CUDA device to copy to, but ", missing);
  }
  if (nbytes == 0) return;
  if (pinned) {
    data_ = alloc::pinned_allocate(nbytes);
  } else if (device.is_cpu()) {
    data_ = alloc::cpu_allocate(nbytes);
  } else {
    check_device_available(device, caller);
    data_ = alloc::cuda_allocate(device.index(), nbytes);
  }
}

Storage::~Storage() noexcept {
  if (data_ == nullptr) return;
  if (pinned_) {
    alloc::pinned_free(data_);
  } else if (device_.is_cpu()) {
    alloc::cpu_free(data_, nbytes_);
  } else {
    alloc::cuda_free(device_.index(), data_);
  }
}

MemoryStats memory_stats(Device device) {
  if (device.is_cpu()) return alloc::cpu_stats();
  check_device_available(device, "memory_stats");
  return alloc::cuda_stats(device.index());
}

void reset_peak_memory_stats(Device device) {
  if (device.is_cpu()) return alloc::cpu_reset_peak();
  check_device_available(device, "reset_peak_memory_stats");
  alloc::cuda_reset_peak(device.index());
}

MemoryStats pinned_memory_stats() { return alloc::pinned_stats(); }

void empty_cache(Device device) {
  if (device.is_cpu()) return;
  check_device_available(device, "empty_cache");
  alloc::cuda_empty_cache(device.index());
}

}  // namespace tandem
