#pragma once
// The size classes and the best-fit lookup that the caching allocators of device memory (caching_allocator.cpp) and
// of page-locked host memory (pinned_allocator.cpp) share.

#include <cstddef>
#include <limits>
#include <map>
#include <utility>

namespace tandem::alloc {

// Requests up to 1 MiB are rounded up to 512 bytes, larger ones to 2 MiB, so that blocks of nearby sizes are
// interchangeable; a cached block serves any request of at least half its size.
inline constexpr size_t kSmallGranularity = 512;
inline constexpr size_t kLargeGranularity = size_t{2} << 20;
inline constexpr size_t kLargeThreshold = size_t{1} << 20;
// Larger requests are refused as out of memory before any rounding could overflow.
inline constexpr size_t kMaxRequest = std::numeric_limits<size_t>::max() / 4;

inline size_t round_up(size_t nbytes) {
  const size_t granularity = nbytes <= kLargeThreshold ? kSmallGranularity : kLargeGranularity;
  return (nbytes + granularity - 1) / granularity * granularity;
}

// The smallest cached block of at least `size` bytes and at most twice that, taken out of `free_blocks` (blocks by
// size); or {nullptr, 0}.
inline std::pair<void*, size_t> take_cached_block(std::multimap<size_t, void*>& free_blocks, size_t size) {
  const auto block = free_blocks.lower_bound(size);
  if (block == free_blocks.end() || block->first > 2 * size) return {nullptr, 0};
  const std::pair<void*, size_t> taken{block->second, block->first};
  free_blocks.erase(block);
  return taken;
}

inline double gib(size_t bytes) { return static_cast<double>(bytes) / static_cast<double>(size_t{1} << 30); }

}  // namespace tandem::alloc
