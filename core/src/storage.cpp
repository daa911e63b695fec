#include "tandem/core/storage.h"

#include "allocator.h"

namespace tandem {

Storage::Storage(Device device, size_t nbytes) : device_(device), nbytes_(nbytes), data_(nullptr) {
  if (nbytes == 0) return;
  if (device.is_cpu()) {
    data_ = alloc::cpu_allocate(nbytes);
  } else {
    check_device_available(device, "Storage");
    data_ = alloc::cuda_allocate(device.index(), nbytes);
  }
}

Storage::~Storage() noexcept {
  if (data_ == nullptr) return;
  if (device_.is_cpu()) {
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

void empty_cache(Device device) {
  if (device.is_cpu()) return;
  check_device_available(device, "empty_cache");
  alloc::cuda_empty_cache(device.index());
}

}  // namespace tandem
