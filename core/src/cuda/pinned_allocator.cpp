// The caching allocator of page-locked host memory behind pinned storages (Tensor::pin_memory, Tensor::empty_pinned):
// blocks from cudaHostAlloc are reused, and none is handed out again while an asynchronous copy may still use it.

#include <cuda_runtime.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "allocator.h"
#include "block_cache.h"
#include "tandem/core/cuda/collective_launch.h"
#include "tandem/core/cuda/context.h"
#include "tandem/core/error.h"
#include "tandem/core/stream_marker.h"

namespace tandem::alloc {
namespace {

// Note [Pinned block reuse]: a copy between a pinned block and a GPU issued with non_blocking
// (Tensor::to(device, true)) is only enqueued when the call returns; the copy engine reads the block later, while
// the host goes on, and the block may be freed (its last tensor dropped) before the copy has run. Device blocks do
// not have this problem, because every use of them is ordered on one compute stream (Note [Stream-ordered reuse]);
// but the host, which writes a pinned block as soon as it gets it, is ordered after nothing on any stream. So:
//   - every asynchronous copy records its use of the block (pinned_record_use): a marker (an event from the device's
//     pool, Note [Stream markers]) recorded on the compute stream right after the copy was enqueued. A block keeps
//     the latest marker per device only: the uses on one device are ordered on its compute stream, so the latest one
//     finishes last;
//   - a freed block whose markers may still be pending waits in `pending`, not among the free blocks;
//   - pinned_allocate first moves each pending block whose markers have all completed to the free blocks, asking
//     with cudaEventQuery (StreamMarker::query), and only hands out free blocks. When none fits, cudaHostAlloc makes
//     a new block: the cache grows by the copies in flight instead of the host waiting for them. The host never
//     waits here.
// Blocks are never given back (cudaFreeHost synchronizes the device): the cache holds at most what was in use, or
// in flight, at the busiest moment.
struct PinnedBlock {
  size_t size = 0;
  std::vector<StreamMarker> uses;  // the latest use on each device, in no order
};

struct PinnedCache {
  std::mutex mutex;
  std::unordered_map<void*, PinnedBlock> live;         // handed out
  std::vector<std::pair<void*, PinnedBlock>> pending;  // freed, with uses that may still run
  std::multimap<size_t, void*> free_blocks;            // freed and unused, by size, for best-fit reuse
  MemoryStats stats;
};

// Never destroyed: pinned storages that outlive static destruction may still return their blocks.
PinnedCache& pinned_cache() {
  static PinnedCache* const cache = new PinnedCache();
  return *cache;
}

bool uses_finished(const PinnedBlock& block) {
  return std::all_of(block.uses.begin(), block.uses.end(), [](const StreamMarker& use) { return use.query(); });
}

// Moves the pending blocks whose uses have all finished to the free blocks. The caller holds cache.mutex. (erase_if
// never moves an entry onto itself: a hand-written compaction that did would empty a kept block's uses, and the next
// call would take the block for finished while its copy still waits.)
void collect_finished(PinnedCache& cache) {
  std::erase_if(cache.pending, [&](const std::pair<void*, PinnedBlock>& entry) {
    if (!uses_finished(entry.second)) return false;
    cache.free_blocks.emplace(entry.second.size, entry.first);
    return true;
  });
}

// A new page-locked block of `size` bytes. The caller holds cache.mutex.
void* allocate_block(PinnedCache& cache, size_t size, size_t requested) {
  void* ptr = nullptr;
  // Portable: page-locked for every device, not just the current one, so that it feeds copies to any GPU.
  const cudaError_t status = cudaHostAlloc(&ptr, size, cudaHostAllocPortable);
  if (status == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    TANDEM_FAIL("alloc::pinned_allocate: out of page-locked host memory allocating ", requested, " bytes (",
                gib(requested), " GiB); pinned tensors hold ", cache.stats.allocated_bytes, " bytes");
  }
  if (status != cudaSuccess)
    cuda::throw_cuda_error(status, "cudaHostAlloc(&ptr, size, cudaHostAllocPortable)", __FILE__, __LINE__);
  cache.stats.reserved_bytes += size;
  ++cache.stats.device_allocations;
  return ptr;
}

}  // namespace

void* pinned_allocate(size_t nbytes) {
  if (nbytes == 0) return nullptr;
  cuda::assert_not_launching_collective("alloc::pinned_allocate", "allocating page-locked memory");
  TANDEM_CHECK(nbytes <= kMaxRequest, "alloc::pinned_allocate: out of page-locked host memory allocating ", nbytes,
               " bytes (", gib(nbytes), " GiB)");
  const size_t size = round_up(nbytes);
  PinnedCache& cache = pinned_cache();
  std::lock_guard lock(cache.mutex);
  collect_finished(cache);
  auto [ptr, block_size] = take_cached_block(cache.free_blocks, size);
  if (ptr == nullptr) {
    ptr = allocate_block(cache, size, nbytes);
    block_size = size;
  }
  cache.live.emplace(ptr, PinnedBlock{block_size, {}});
  cache.stats.allocated_bytes += block_size;
  cache.stats.peak_allocated_bytes = std::max(cache.stats.peak_allocated_bytes, cache.stats.allocated_bytes);
  return ptr;
}

void pinned_record_use(void* block, int device) {
  StreamMarker use = StreamMarker::record(Device::cuda(device));
  PinnedCache& cache = pinned_cache();
  std::lock_guard lock(cache.mutex);
  const auto found = cache.live.find(block);
  TANDEM_INTERNAL_ASSERT(found != cache.live.end(), "alloc::pinned_record_use: ", block,
                         " is not a live block of the pinned allocator");
  std::vector<StreamMarker>& uses = found->second.uses;
  const auto same_device = std::find_if(uses.begin(), uses.end(),
                                        [&](const StreamMarker& earlier) { return earlier.device() == use.device(); });
  if (same_device != uses.end()) {
    *same_device = std::move(use);
  } else {
    uses.push_back(std::move(use));
  }
}

// Runs from Storage's destructor, so nothing is thrown (Note [No throw on free paths]): a failure is reported and the
// block stays out of the cache.
void pinned_free(void* ptr) noexcept {
  if (ptr == nullptr) return;
  static constinit detail::ReportOnce failures("returning a block to the pinned allocator");
  failures.run([&] {
    PinnedCache& cache = pinned_cache();
    std::lock_guard lock(cache.mutex);
    const auto block = cache.live.find(ptr);
    TANDEM_INTERNAL_ASSERT(block != cache.live.end(), "alloc::pinned_free: ", ptr,
                           " is not a live block of the pinned allocator");
    const size_t size = block->second.size;
    // Note [Pinned block reuse]: a block with recorded uses waits until they have finished.
    if (block->second.uses.empty()) {
      cache.free_blocks.emplace(size, ptr);
    } else {
      cache.pending.emplace_back(ptr, std::move(block->second));
    }
    cache.stats.allocated_bytes -= size;
    cache.live.erase(block);
  });
}

MemoryStats pinned_stats() {
  PinnedCache& cache = pinned_cache();
  std::lock_guard lock(cache.mutex);
  return cache.stats;
}

}  // namespace tandem::alloc
