// The per-device caching allocator behind CUDA storages: after warm-up, a training step reuses cached blocks and
// never calls cudaMalloc or cudaFree.

#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <unordered_map>

#include "allocator.h"
#include "block_cache.h"
#include "tandem/core/cuda/collective_launch.h"
#include "tandem/core/cuda/context.h"
#include "tandem/core/error.h"

namespace tandem::alloc {
namespace {

// Note [Stream-ordered reuse]: every tensor of a device is produced and consumed on that device's compute stream;
// work on other streams (the comm stream, peer copies issued on another device's stream) joins back into the
// compute stream through events before the tensors it touched can be released. So when a block is freed, every
// use of it is already enqueued on the compute stream, and whoever gets the block next enqueues its work after
// them: a freed block can be handed out again at once, with no event and no host synchronization.
//
// Note [Returning memory to the driver]: blocks only go back to the driver in release_cached_blocks, which runs in
// exactly two cases: cuda_empty_cache (empty_cache(device)), and cudaMalloc running out of memory (the cached blocks
// of that device are released and the allocation retried once). Either way it first calls cudaDeviceSynchronize on
// that device, since the last uses of the cached blocks may still be running: these are the only
// cudaDeviceSynchronize calls in the library. A release must not fall between two launches of one collective, so it
// holds a CollectiveLaunchExclusion (Note [Launching collectives]); and the thread that launches a collective must
// not allocate, free or release device memory before the launch is done, which cuda_allocate, cuda_free and
// cuda_empty_cache assert (Note [No device allocation during a collective launch]).
//
// Note [Capture pool]: while a CUDA graph is captured on a device (cuda_begin_capture_pool .. cuda_end_capture_pool),
// nothing executes: the kernels are recorded with the addresses they were given, and every replay of the graph
// reads and writes those same addresses. So a block that the capture uses must belong to the graph for as long as
// the graph exists: if the cache handed it to anything outside, a replay and that other work would share memory.
// Every block allocated on the device during the capture therefore comes from a pool owned by the capture, and so
// does every block freed on the device during the capture (the graph may have used it before the free). Within the
// capture, a block freed into the pool is handed out again to later allocations of the same capture: every tensor
// of a device is used on its compute stream (Note [Stream-ordered reuse]), and capture turns stream order into
// graph order, so in every replay the later user runs after the earlier one, as it would eagerly. A new pool block
// is taken from the device's cached blocks when one fits (all its earlier uses were issued before the capture, and a
// replay is ordered after all work issued before it: DeviceGraph::replay) and from cudaMalloc otherwise (allowed
// while capturing in relaxed mode). Nothing outside the capture ever gets a block of the pool: once the capture
// ends, blocks freed into the pool stay there. When the graph is destroyed (after synchronizing its devices),
// cuda_release_capture_pool returns the pool's free blocks to the device's cache; its blocks still held by tensors
// (the graph's static outputs, kept by their owners) go there when they are freed.
struct CapturePool {
  std::multimap<size_t, void*> free_blocks;  // by size, for best-fit reuse within the capture
  size_t live = 0;                           // blocks of the pool held by tensors
  bool released = false;                     // the graph is gone: freed blocks go back to the device's cache
};

struct LiveBlock {
  size_t size;
  uint64_t pool;  // the capture pool that owns the block; 0 for none
};

struct DeviceCache {
  std::mutex mutex;
  std::multimap<size_t, void*> free_blocks;          // cached blocks by size, for best-fit reuse
  std::unordered_map<void*, LiveBlock> live_blocks;  // blocks handed out, with their sizes and pools
  std::unordered_map<uint64_t, CapturePool> pools;   // Note [Capture pool]
  uint64_t capturing = 0;                            // the pool of the capture active on the device; 0 for none
  uint64_t last_pool = 0;
  MemoryStats stats;
};

// Never destroyed: storages that outlive static destruction may still return their blocks, and freeing device
// memory at exit is left to the driver.
DeviceCache& cache_of(int device, const char* caller) {
  static const int count = cuda_visible_devices();
  static DeviceCache* const caches = new DeviceCache[count];
  // Storage and the backends pass devices that check_device_available has accepted.
  TANDEM_INTERNAL_ASSERT(device >= 0 && device < count, caller, ": device cuda:", device, " does not exist (", count,
                         " CUDA devices visible)");
  return caches[device];
}

// Returns every cached block of `device` to the driver (Note [Returning memory to the driver]). The caller holds
// cache.mutex.
void release_cached_blocks(DeviceCache& cache, int device) {
  if (cache.free_blocks.empty()) return;
  cuda::CollectiveLaunchExclusion no_collective_launch;
  cuda::DeviceGuard guard(device);
  TANDEM_CUDA_CHECK(cudaDeviceSynchronize());  // the last uses of the cached blocks have finished
  while (!cache.free_blocks.empty()) {
    const auto block = cache.free_blocks.begin();
    TANDEM_CUDA_CHECK(cudaFree(block->second));
    cache.stats.reserved_bytes -= block->first;
    cache.free_blocks.erase(block);
  }
}

// A new block of `size` bytes from cudaMalloc. The caller holds cache.mutex.
void* allocate_block(DeviceCache& cache, int device, size_t size, size_t requested) {
  cuda::DeviceGuard guard(device);
  void* ptr = nullptr;
  cudaError_t status = cudaMalloc(&ptr, size);
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();  // out of memory is not sticky: clear it so later launch checks do not see it
    release_cached_blocks(cache, device);
    status = cudaMalloc(&ptr, size);
  }
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    size_t free_bytes = 0;
    size_t total_bytes = 0;
    if (cudaMemGetInfo(&free_bytes, &total_bytes) != cudaSuccess) (void)cudaGetLastError();
    TANDEM_FAIL("alloc::cuda_allocate: out of memory on cuda:", device, " allocating ", requested, " bytes (",
                gib(requested), " GiB); tensors hold ", cache.stats.allocated_bytes, " bytes on that device, ",
                free_bytes, " of ", total_bytes, " bytes are free");
  }
  if (status != cudaSuccess) cuda::throw_cuda_error(status, "cudaMalloc(&ptr, size)", __FILE__, __LINE__);
  cache.stats.reserved_bytes += size;
  ++cache.stats.device_allocations;
  return ptr;
}

}  // namespace

void* cuda_allocate(int device, size_t nbytes) {
  DeviceCache& cache = cache_of(device, "alloc::cuda_allocate");
  if (nbytes == 0) return nullptr;
  cuda::assert_not_launching_collective("alloc::cuda_allocate", "allocating device memory");
  TANDEM_CHECK(nbytes <= kMaxRequest, "alloc::cuda_allocate: out of memory on cuda:", device, " allocating ",
               nbytes, " bytes (", gib(nbytes), " GiB)");
  const size_t size = round_up(nbytes);
  std::lock_guard lock(cache.mutex);
  std::pair<void*, size_t> block{nullptr, 0};
  if (cache.capturing != 0) block = take_cached_block(cache.pools.at(cache.capturing).free_blocks, size);
  if (block.first == nullptr) block = take_cached_block(cache.free_blocks, size);
  auto [ptr, block_size] = block;
  if (ptr == nullptr) {
    ptr = allocate_block(cache, device, size, nbytes);
    block_size = size;
  }
  cache.live_blocks.emplace(ptr, LiveBlock{block_size, cache.capturing});
  if (cache.capturing != 0) ++cache.pools.at(cache.capturing).live;
  cache.stats.allocated_bytes += block_size;
  cache.stats.peak_allocated_bytes = std::max(cache.stats.peak_allocated_bytes, cache.stats.allocated_bytes);
  return ptr;
}

// Runs from Storage and Scratch destructors, so nothing is thrown (Note [No throw on free paths]): a failure is
// reported and the block stays out of the cache (leaked until the process exits).
void cuda_free(int device, void* ptr) noexcept {
  if (ptr == nullptr) return;
  static constinit detail::ReportOnce failures("returning a block to the caching allocator");
  failures.run([&] {
    cuda::assert_not_launching_collective("alloc::cuda_free", "freeing device memory");
    DeviceCache& cache = cache_of(device, "alloc::cuda_free");
    std::lock_guard lock(cache.mutex);
    const auto block = cache.live_blocks.find(ptr);
    TANDEM_INTERNAL_ASSERT(block != cache.live_blocks.end(), "alloc::cuda_free: ", ptr,
                           " is not a live block of the caching allocator of cuda:", device);
    const auto [size, owner] = block->second;
    // Note [Capture pool]: the pool that owns the block, or the active capture's for a block it may have used.
    const uint64_t pool_id = owner != 0 ? owner : cache.capturing;
    CapturePool* pool = pool_id != 0 ? &cache.pools.at(pool_id) : nullptr;
    // Inserting comes first, as only it can throw; see Note [Stream-ordered reuse].
    if (pool != nullptr && !pool->released) {
      pool->free_blocks.emplace(size, ptr);
    } else {
      cache.free_blocks.emplace(size, ptr);
    }
    cache.stats.allocated_bytes -= size;
    cache.live_blocks.erase(block);
    if (owner != 0 && --pool->live == 0 && pool->released) cache.pools.erase(owner);
  });
}

uint64_t cuda_begin_capture_pool(int device) {
  DeviceCache& cache = cache_of(device, "alloc::cuda_begin_capture_pool");
  std::lock_guard lock(cache.mutex);
  TANDEM_CHECK(cache.capturing == 0, "alloc::cuda_begin_capture_pool: a capture is already active on cuda:", device,
               " but expected none (one capture per device at a time)");
  cache.capturing = ++cache.last_pool;
  cache.pools.emplace(cache.capturing, CapturePool{});
  return cache.capturing;
}

void cuda_end_capture_pool(int device) noexcept {
  DeviceCache& cache = cache_of(device, "alloc::cuda_end_capture_pool");
  std::lock_guard lock(cache.mutex);
  cache.capturing = 0;
}

void cuda_release_capture_pool(int device, uint64_t pool_id) noexcept {
  DeviceCache& cache = cache_of(device, "alloc::cuda_release_capture_pool");
  std::lock_guard lock(cache.mutex);
  const auto found = cache.pools.find(pool_id);
  if (found == cache.pools.end()) return;
  CapturePool& pool = found->second;
  if (cache.capturing == pool_id) cache.capturing = 0;
  cache.free_blocks.merge(pool.free_blocks);
  pool.released = true;
  if (pool.live == 0) cache.pools.erase(found);
}

MemoryStats cuda_stats(int device) {
  DeviceCache& cache = cache_of(device, "alloc::cuda_stats");
  std::lock_guard lock(cache.mutex);
  return cache.stats;
}

void cuda_reset_peak(int device) {
  DeviceCache& cache = cache_of(device, "alloc::cuda_reset_peak");
  std::lock_guard lock(cache.mutex);
  cache.stats.peak_allocated_bytes = cache.stats.allocated_bytes;
}

void cuda_empty_cache(int device) {
  cuda::assert_not_launching_collective("alloc::cuda_empty_cache", "releasing device memory");
  DeviceCache& cache = cache_of(device, "alloc::cuda_empty_cache");
  std::lock_guard lock(cache.mutex);
  release_cached_blocks(cache, device);
}

}  // namespace tandem::alloc
