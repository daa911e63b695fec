// Host memory for CPU storages: 64-byte aligned (one cache line, and wide enough for any SIMD load Eigen emits),
// with thread-safe counters for memory_stats.

#include <algorithm>
#include <atomic>
#include <cstdlib>

#include "allocator.h"
#include "tandem/core/error.h"

namespace tandem::alloc {
namespace {

constexpr size_t kAlignment = 64;

std::atomic<size_t> g_allocated_bytes{0};
std::atomic<size_t> g_allocations{0};
std::atomic<size_t> g_peak_bytes{0};

// std::aligned_alloc requires the size to be a multiple of the alignment.
size_t rounded_size(size_t nbytes) { return (nbytes + kAlignment - 1) / kAlignment * kAlignment; }

}  // namespace

void* cpu_allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  const size_t size = rounded_size(nbytes);
  TANDEM_CHECK(size >= nbytes, "cpu allocator: out of memory allocating ", nbytes, " bytes");
  void* ptr = std::aligned_alloc(kAlignment, size);
  TANDEM_CHECK(ptr != nullptr, "cpu allocator: out of memory allocating ", nbytes, " bytes");
  const size_t now = g_allocated_bytes.fetch_add(size, std::memory_order_relaxed) + size;
  g_allocations.fetch_add(1, std::memory_order_relaxed);
  size_t peak = g_peak_bytes.load(std::memory_order_relaxed);
  while (now > peak && !g_peak_bytes.compare_exchange_weak(peak, now, std::memory_order_relaxed)) {
  }
  return ptr;
}

void cpu_free(void* ptr, size_t nbytes) noexcept {
  if (ptr == nullptr) return;
  std::free(ptr);
  g_allocated_bytes.fetch_sub(rounded_size(nbytes), std::memory_order_relaxed);
}

MemoryStats cpu_stats() {
  MemoryStats stats;
  stats.allocated_bytes = g_allocated_bytes.load(std::memory_order_relaxed);
  stats.reserved_bytes = stats.allocated_bytes;  // host memory goes straight back to the OS allocator
  stats.device_allocations = g_allocations.load(std::memory_order_relaxed);
  stats.peak_allocated_bytes = std::max(g_peak_bytes.load(std::memory_order_relaxed), stats.allocated_bytes);
  return stats;
}

void cpu_reset_peak() {
  g_peak_bytes.store(g_allocated_bytes.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

}  // namespace tandem::alloc
