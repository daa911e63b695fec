// The CUDA caching allocator, through Storage and the public memory statistics.

#include <cstdint>
#include <vector>

#include "support/test_support.h"

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

}  // namespace
}  // namespace tandem
