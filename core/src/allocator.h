#pragma once
// Allocators behind Storage. CPU: 64-byte aligned host memory (cpu/cpu_allocator.cpp). CUDA: one caching
// allocator per device (cuda/caching_allocator.cpp), so that a training step does no cudaMalloc/cudaFree after
// warm-up, and one caching allocator of page-locked host memory (cuda/pinned_allocator.cpp); without CUDA these throw
// (nocuda/).

#include <cstddef>

#include "tandem/core/storage.h"

namespace tandem::alloc {

// The free functions run from Storage's destructor and never throw (Note [No throw on free paths] in
// tandem/core/error.h).
void* cpu_allocate(size_t nbytes);
void cpu_free(void* ptr, size_t nbytes) noexcept;
MemoryStats cpu_stats();

void* cuda_allocate(int device, size_t nbytes);
void cuda_free(int device, void* ptr) noexcept;
MemoryStats cuda_stats(int device);
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

}  // namespace tandem::alloc
