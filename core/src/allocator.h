#pragma once
// Allocators behind Storage. CPU: 64-byte aligned host memory (cpu/cpu_allocator.cpp). CUDA: one caching
// allocator per device (cuda/caching_allocator.cpp), so that a training step does no cudaMalloc/cudaFree after
// warm-up, and one caching allocator of page-locked host memory (cuda/pinned_allocator.cpp); without CUDA these throw
// (nocuda/).

#include <cstddef>
#include <cstdint>

#include "tandem/core/storage.h"

namespace tandem::alloc {

// The free functions run from Storage's destructor and never throw (Note [No throw on free paths] in
// tandem/core/error.h).
void* cpu_allocate(size_t nbytes);
void cpu_free(void* ptr, size_t nbytes) noexcept;
MemoryStats cpu_stats();
void cpu_reset_peak();

void* cuda_allocate(int device, size_t nbytes);
void cuda_free(int device, void* ptr) noexcept;
MemoryStats cuda_stats(int device);
void cuda_reset_peak(int device);
void cuda_empty_cache(int device);
int cuda_visible_devices();  // cudaGetDeviceCount, 0 on any error (no driver, no GPU)

// Page-locked host memory from cudaHostAlloc, cached and reused (Note [Pinned block reuse] in
// cuda/pinned_allocator.cpp).
void* pinned_allocate(size_t nbytes);
void pinned_free(void* ptr) noexcept;
// Records that work just enqueued on `device`'s compute stream reads or writes the pinned block that starts at
// `block` (a pinned Storage's data()): once freed, the block is not handed out again before that work has finished.
void pinned_record_use(void* block, int device);
MemoryStats pinned_stats();

// The capture pools of Note [Capture pool] (cuda/caching_allocator.cpp), used by DeviceGraph. Begin: until the end
// call, every block allocated or freed on `device` belongs to a new pool, whose id is returned. Errors: a capture
// already active on the device. Release: the graph that captured with the pool is gone and its device has finished
// its work; the pool's blocks return to the device's cache (those still held by tensors when they are freed).
uint64_t cuda_begin_capture_pool(int device);
void cuda_end_capture_pool(int device) noexcept;
void cuda_release_capture_pool(int device, uint64_t pool) noexcept;

}  // namespace tandem::alloc
