// The CUDA caching allocator, through Storage and the public memory statistics.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "support/test_support.h"
#include "tandem/core/cuda/collective_launch.h"

namespace tandem {
namespace {

constexpr size_t kMiB = size_t{1} << 20;
constexpr size_t kGiB = size_t{1} << 30;

TEST(CachingAllocatorCUDA, ReusesAFreedBlockWithoutCallingTheDriver) {
  TANDEM_REQUIRE_GPUS(1);
  const Device gpu = Device::cuda(0);
  empty_cache(gpu);
  void* first = nullptr;
  {
    Storage storage(gpu, 3 * kMiB);
    first = storage.data();
  }
  const MemoryStats before = memory_stats(gpu);
  for (int i = 0; i < 10; ++i) {
    Storage storage(gpu, 3 * kMiB);
    EXPECT_EQ(storage.data(), first);
  }
  EXPECT_EQ(memory_stats(gpu).device_allocations, before.device_allocations);
}

TEST(CachingAllocatorCUDA, ServesSmallerRequestsFromACachedBlock) {
  TANDEM_REQUIRE_GPUS(1);
  const Device gpu = Device::cuda(0);
  empty_cache(gpu);
  { Storage storage(gpu, 8 * kMiB); }
  const MemoryStats before = memory_stats(gpu);
  { Storage storage(gpu, 5 * kMiB); }  // rounds to 6 MiB, and an 8 MiB block is within twice that
  EXPECT_EQ(memory_stats(gpu).device_allocations, before.device_allocations);
}

TEST(CachingAllocatorCUDA, ZeroByteStorageAllocatesNothing) {
  TANDEM_REQUIRE_GPUS(1);
  const Device gpu = Device::cuda(0);
  const MemoryStats before = memory_stats(gpu);
  {
    Storage storage(gpu, 0);
    EXPECT_EQ(storage.nbytes(), 0u);
    EXPECT_EQ(storage.device(), gpu);
    const MemoryStats during = memory_stats(gpu);
    EXPECT_EQ(during.allocated_bytes, before.allocated_bytes);
    EXPECT_EQ(during.device_allocations, before.device_allocations);
  }
  EXPECT_EQ(memory_stats(gpu).allocated_bytes, before.allocated_bytes);
}

TEST(CachingAllocatorCUDA, StatsFollowAllocationsAndEmptyCache) {
  TANDEM_REQUIRE_GPUS(1);
  const Device gpu = Device::cuda(0);
  empty_cache(gpu);
  const MemoryStats start = memory_stats(gpu);
  EXPECT_EQ(start.reserved_bytes, start.allocated_bytes);  // nothing cached right after empty_cache
  {
    Storage small(gpu, 1000);    // rounds to 1024 bytes
    Storage large(gpu, 5 * kMiB);  // rounds to 6 MiB
    const MemoryStats during = memory_stats(gpu);
    EXPECT_EQ(during.allocated_bytes, start.allocated_bytes + 1024 + 6 * kMiB);
    EXPECT_EQ(during.reserved_bytes, start.reserved_bytes + 1024 + 6 * kMiB);
    EXPECT_EQ(during.device_allocations, start.device_allocations + 2);
  }
  const MemoryStats cached = memory_stats(gpu);
  EXPECT_EQ(cached.allocated_bytes, start.allocated_bytes);
  EXPECT_GE(cached.peak_allocated_bytes, start.allocated_bytes + 1024 + 6 * kMiB);
  reset_peak_memory_stats(gpu);
  EXPECT_EQ(memory_stats(gpu).peak_allocated_bytes, start.allocated_bytes);
  EXPECT_EQ(cached.reserved_bytes, start.reserved_bytes + 1024 + 6 * kMiB);
  empty_cache(gpu);
  const MemoryStats emptied = memory_stats(gpu);
  EXPECT_EQ(emptied.reserved_bytes, start.reserved_bytes);
  EXPECT_EQ(emptied.allocated_bytes, start.allocated_bytes);
}

TEST(CachingAllocatorCUDA, BigAllocationHoldsValues) {
  TANDEM_REQUIRE_GPUS(1);
  const Device gpu = Device::cuda(0);
  const int64_t n = int64_t{1} << 30;  // 4 GiB of floats
  const MemoryStats before = memory_stats(gpu);
  {
    Tensor big = Tensor::full({n}, 0.5f, gpu);
    EXPECT_GE(memory_stats(gpu).allocated_bytes, before.allocated_bytes + 4 * kGiB);
    // Every partial sum of the reduction is a power-of-two multiple of a few bits, so the float sum is exact.
    EXPECT_EQ(sum(big).item(), 0.5f * static_cast<float>(n));
    const std::vector<float> tail = big.narrow(0, n - 3, 3).to_vector();
    EXPECT_EQ(tail, std::vector<float>(3, 0.5f));
  }
  EXPECT_EQ(memory_stats(gpu).allocated_bytes, before.allocated_bytes);
  empty_cache(gpu);
}

TEST(CachingAllocatorCUDA, OutOfMemoryThrowsAndLeavesTheDeviceUsable) {
  TANDEM_REQUIRE_GPUS(1);
  const Device gpu = Device::cuda(0);
  const size_t impossible = size_t{1} << 50;  // 1 PiB
  EXPECT_ERROR(Storage storage(gpu, impossible), "out of memory on cuda:0");
  EXPECT_ERROR(Storage storage(gpu, impossible), "1125899906842624 bytes");
  // The failed cudaMalloc must not surface in later launch checks.
  const Tensor x = Tensor::full({1000}, 2.0f, gpu);
  testing::expect_values(x * x, std::vector<double>(1000, 4.0), {1000});
}

// Note [No device allocation during a collective launch]: the launching thread gets an InternalError instead of a
// possible deadlock, whether or not the cache could serve the request.
TEST(CachingAllocatorCUDA, AllocatingDuringACollectiveLaunchIsAnInternalError) {
  TANDEM_REQUIRE_GPUS(1);
  const Device gpu = Device::cuda(0);
  { Storage cached(gpu, kMiB); }  // a cached block that could serve the next request
  const MemoryStats before = memory_stats(gpu);
  {
    cuda::CollectiveLaunchLock launch;
    try {
      Storage storage(gpu, kMiB);
      ADD_FAILURE() << "allocated during a collective launch";
    } catch (const InternalError& e) {
      EXPECT_NE(std::string(e.what()).find("alloc::cuda_allocate: allocating device memory while this thread "
                                           "launches a collective"),
                std::string::npos)
          << e.what();
    }
    EXPECT_THROW(empty_cache(gpu), InternalError);
  }
  const MemoryStats after = memory_stats(gpu);
  EXPECT_EQ(after.allocated_bytes, before.allocated_bytes);
  EXPECT_EQ(after.reserved_bytes, before.reserved_bytes);
  Storage storage(gpu, kMiB);  // fine once the launch is over
  EXPECT_EQ(memory_stats(gpu).device_allocations, before.device_allocations);
}

// Freeing runs in Storage's destructor, so the same broken rule is reported on stderr, never thrown; the block is left
// out of the cache.
TEST(CachingAllocatorCUDA, FreeingDuringACollectiveLaunchIsReportedNotThrown) {
  TANDEM_REQUIRE_GPUS(1);
  const Device gpu = Device::cuda(0);
  auto storage = std::make_unique<Storage>(gpu, kMiB);
  const MemoryStats before = memory_stats(gpu);
  ::testing::internal::CaptureStderr();
  {
    cuda::CollectiveLaunchLock launch;
    storage.reset();
  }
  const std::string output = ::testing::internal::GetCapturedStderr();
  EXPECT_NE(output.find("tandem: returning a block to the caching allocator: alloc::cuda_free: freeing device memory "
                        "while this thread launches a collective"),
            std::string::npos)
      << output;
  EXPECT_EQ(memory_stats(gpu).allocated_bytes, before.allocated_bytes);  // still counted as held: it was not cached
}

}  // namespace
}  // namespace tandem
