#pragma once
// Storage: a block of bytes that knows its device (and, on the host, whether it is page-locked). Tensors (and views of
// them) share one Storage.

#include <cstddef>
#include <memory>

#include "tandem/core/device.h"

namespace tandem {

class Storage {
 public:
  // Allocates `nbytes` on `device` through that device's allocator (64-byte aligned host memory for CPU devices,
  // the per-device caching allocator for CUDA devices). Zero bytes is allowed and allocates nothing.
  Storage(Device device, size_t nbytes);
  // With `pinned`, host bytes from the caching allocator of page-locked memory (Note [Pinned block reuse] in
  // core/src/cuda/pinned_allocator.cpp), which copies to a GPU can read asynchronously (Tensor::to(device, true)).
  // Errors: pinned with a CUDA device; pinned without a CUDA device to pin for (no GPU visible, or a build without
  // CUDA), naming `caller`.
  Storage(Device device, size_t nbytes, bool pinned, const char* caller = "Storage");
  // Gives the bytes back to the device's allocator. Never throws: a failure there is reported on stderr (Note [No
  // throw on free paths] in tandem/core/error.h).
  ~Storage() noexcept;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }
  bool is_pinned() const { return pinned_; }

 private:
  Device device_;
  size_t nbytes_;
  bool pinned_ = false;
  void* data_;
};

// Allocator statistics for one device (CUDA: the caching allocator; CPU: plain counters).
struct MemoryStats {
  size_t allocated_bytes = 0;    // bytes held by live storages
  size_t reserved_bytes = 0;     // bytes obtained from the driver / OS and not yet released
  size_t device_allocations = 0; // number of cudaMalloc (or aligned_alloc) calls so far
  // The most allocated_bytes reached since the allocator started or reset_peak_memory_stats (PyTorch's
  // torch.cuda.max_memory_allocated): what a training step needs at its busiest.
  size_t peak_allocated_bytes = 0;
};
// The statistics of the device's allocator (every CPU device shares the host's).
MemoryStats memory_stats(Device device);
// Starts the device's peak_allocated_bytes again from what is allocated now (torch.cuda.reset_peak_memory_stats).
void reset_peak_memory_stats(Device device);
// The caching allocator of page-locked host memory (all zeros while nothing was pinned; device_allocations counts
// cudaHostAlloc calls).
MemoryStats pinned_memory_stats();
// Releases cached, unused blocks of a CUDA device back to the driver (no-op for CPU devices). It first waits for all
// work on that device (cudaDeviceSynchronize), as the caching allocator also does when cudaMalloc runs out of memory
// and it releases the cached blocks before retrying: those are the only device-wide synchronizations in tandem.
void empty_cache(Device device);

}  // namespace tandem
