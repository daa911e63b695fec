// Page-locked host memory: Tensor::pin_memory / empty_pinned / is_pinned, asynchronous copies to a GPU
// (Tensor::to(device, true)), the pinned caching allocator's reuse rule, StreamMarker::query / synchronize and
// warm_up. Each test that needs a GPU checks the error a machine without one gives instead.

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "support/test_support.h"

namespace tandem {
namespace {

const char* const kNoGpuForPinning = "page-locked memory needs a CUDA device to copy to, but ";

bool have_gpu() { return cuda_device_count() > 0; }

std::vector<float> ramp(int64_t n, float scale) {
  std::vector<float> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[static_cast<size_t>(i)] = scale * static_cast<float>(i) - 3.5f;
  return values;
}

TEST(PinnedMemory, PinMemoryCopiesTheValuesOrSaysThatNoGpuIsThere) {
  const Tensor x = Tensor::from_vector(ramp(12, 0.25f), {3, 4}, Device::cpu(1));
  if (!have_gpu()) {
    EXPECT_ERROR(x.pin_memory(), std::string("Tensor::pin_memory: ") + kNoGpuForPinning);
    EXPECT_ERROR(Tensor::empty_pinned({2}), std::string("Tensor::empty_pinned: ") + kNoGpuForPinning);
    EXPECT_ERROR(Tensor::empty_pinned({2}), cuda_built() ? "no CUDA device is visible" : "built without CUDA");
    return;
  }
  const Tensor pinned = x.pin_memory();
  EXPECT_TRUE(pinned.is_pinned());
  EXPECT_FALSE(x.is_pinned());
  EXPECT_FALSE(pinned.shares_storage_with(x));
  EXPECT_EQ(pinned.device(), Device::cpu(1));
  EXPECT_EQ(pinned.shape(), (Shape{3, 4}));
  EXPECT_EQ(pinned.to_vector(), x.to_vector());
  EXPECT_TRUE(pinned.pin_memory().is_same(pinned));  // pinned already: itself
  EXPECT_TRUE(pinned.narrow(0, 1, 2).is_pinned());   // views share the pinned storage

  // A transposed source gives a contiguous pinned copy of its values, in its own row-major order.
  const Tensor transposed = x.t().pin_memory();
  EXPECT_TRUE(transposed.is_contiguous());
  EXPECT_EQ(transposed.to_vector(), x.t().contiguous().to_vector());

  const std::vector<int64_t> labels = {7, -1, 1LL << 40};
  EXPECT_EQ(Tensor::from_vector(labels, {3}).pin_memory().to_vector_as<int64_t>(), labels);
  const Tensor halves = Tensor::from_vector(ramp(5, 0.5f), {5}).to(DType::BFloat16);
  EXPECT_EQ(halves.pin_memory().to(DType::Float32).to_vector(), halves.to(DType::Float32).to_vector());

  const Tensor empty = Tensor::empty_pinned({2, 0}, DType::Int64);
  EXPECT_TRUE(empty.is_pinned());
  EXPECT_EQ(empty.dtype(), DType::Int64);
}

TEST(PinnedMemory, OnlyHostMemoryIsPinned) {
  EXPECT_FALSE(Tensor::zeros({4}).is_pinned());
  EXPECT_FALSE(Tensor::zeros({4}, Device::cpu(2)).narrow(0, 1, 2).is_pinned());
  // Device-memory errors come before the missing-GPU error: pinning a GPU's memory is wrong on any machine.
  EXPECT_ERROR(Tensor::empty_pinned({2}, DType::Float32, Device::cuda(0)),
               "Tensor::empty_pinned: page-locked memory is host memory but the device is cuda:0; expected a CPU");
  EXPECT_ERROR(Storage(Device::cuda(0), 64, /*pinned=*/true, "fn"), "fn: page-locked memory is host memory");
  if (!have_gpu()) return;
  const Tensor on_gpu = Tensor::ones({3}, Device::cuda(0));
  EXPECT_FALSE(on_gpu.is_pinned());
  EXPECT_ERROR(on_gpu.pin_memory(), "Tensor::pin_memory: the tensor is on cuda:0 but expected a CPU tensor");
}

TEST(PinnedMemory, PinMemoryPassesTheGradientThrough) {
  if (!have_gpu()) GTEST_SKIP() << testing::missing_gpus_reason(1) << " (nothing can be pinned)";
  Tensor x = Tensor::from_vector({1, 2, 3}, {3});
  x.set_requires_grad();
  sum(x.pin_memory() * 2.0f).backward();
  testing::expect_values(x.grad(), {2, 2, 2}, {3});
}

TEST(PinnedMemory, NonBlockingCopiesOfPageableMemoryAreOrdinaryCopies) {
  const Tensor x = Tensor::from_vector(ramp(6, 1.5f), {2, 3});
  const Tensor moved = x.to(Device::cpu(3), /*non_blocking=*/true);
  EXPECT_EQ(moved.device(), Device::cpu(3));
  EXPECT_EQ(moved.to_vector(), x.to_vector());
  EXPECT_TRUE(x.to(Device::cpu(0), true).is_same(x));  // same device: no copy, as to(device)
  EXPECT_ERROR(x.to(Device::cuda(cuda_device_count()), true), "Tensor::to: device cuda:");
}

TEST(PinnedMemoryCUDA, NonBlockingRoundTripKeepsTheValues) {
  TANDEM_REQUIRE_GPUS(1);
  const Device gpu = Device::cuda(cuda_device_count() - 1);
  const Tensor host = Tensor::from_vector(ramp(4096, 0.125f), {64, 64}).pin_memory();
  const Tensor on_gpu = host.to(gpu, /*non_blocking=*/true);
  EXPECT_EQ(on_gpu.device(), gpu);
  EXPECT_EQ(on_gpu.to(Device::cpu(), true).to_vector(), host.to_vector());  // to the host: waits, as to(device)
  EXPECT_EQ(on_gpu.to_vector(), host.to_vector());

  const std::vector<int64_t> labels = {3, 1LL << 50, -9, 0};
  const Tensor label_copy = Tensor::from_vector(labels, {2, 2}).pin_memory().to(gpu, true);
  EXPECT_EQ(label_copy.to_vector_as<int64_t>(), labels);
  const Tensor halves = Tensor::from_vector(ramp(7, 0.75f), {7}).to(DType::BFloat16);
  EXPECT_EQ(halves.pin_memory().to(gpu, true).to(DType::Float32).to_vector(), halves.to(DType::Float32).to_vector());
  // A row range of a pinned tensor is a contiguous pinned view: it is copied asynchronously too.
  EXPECT_EQ(host.narrow(0, 10, 3).to(gpu, true).to_vector(), host.narrow(0, 10, 3).to_vector());
  // Strided pinned sources take the ordinary path.
  EXPECT_EQ(host.t().to(gpu, true).to_vector(), host.t().contiguous().to_vector());

  Tensor leaf = Tensor::from_vector({1, 2}, {2}).pin_memory();
  leaf.set_requires_grad();
  sum(leaf.to(gpu, true) * 3.0f).backward();
  testing::expect_values(leaf.grad(), {3, 3}, {2});
  EXPECT_EQ(leaf.grad().device(), Device::cpu());
}

// Long enough that a copy queued behind it has certainly not run when the host checks a moment later.
constexpr std::chrono::milliseconds kHold{200};

TEST(PinnedMemoryCUDA, AFreedBlockIsReusedOnlyAfterItsCopyFinished) {
  TANDEM_REQUIRE_GPUS(1);
  const Device gpu = Device::cuda(0);
  constexpr int64_t kCount = int64_t{4} << 20;  // 16 MiB of float32
  const std::vector<float> values = ramp(kCount, 1.0f / 1024);
  const void* first_block = nullptr;
  Tensor copied;
  // The source's block is freed at the end of this scope, while its copy is still waiting.
  {
    Tensor source = Tensor::empty_pinned({kCount});
    std::copy(values.begin(), values.end(), source.mutable_data());
    first_block = source.data_ptr();
    testing::hold_compute_stream(gpu, kHold);
    copied = source.to(gpu, /*non_blocking=*/true);  // queued behind the hold
  }
  const MemoryStats before = pinned_memory_stats();
  Tensor overwrite = Tensor::empty_pinned({kCount});
  EXPECT_NE(overwrite.data_ptr(), first_block) << "a block was handed out while its copy could still read it";
  EXPECT_EQ(pinned_memory_stats().device_allocations, before.device_allocations + 1);
  std::fill(overwrite.mutable_data(), overwrite.mutable_data() + kCount, -1.0f);
  EXPECT_EQ(copied.to_vector(), values);  // waits for the copy, which read the first block's values

  // Once the copy has run, the first block is free again and serves the next request of its size.
  const Tensor again = Tensor::empty_pinned({kCount});
  EXPECT_EQ(again.data_ptr(), first_block);
  EXPECT_EQ(pinned_memory_stats().device_allocations, before.device_allocations + 1);
}

// A block whose copy is pending stays out of every request until the copy has run, not only the first one after
// it was freed: each request looks at the pending blocks again, and the look must leave their uses in place.
TEST(PinnedMemoryCUDA, APendingBlockStaysPendingThroughEveryLaterRequest) {
  TANDEM_REQUIRE_GPUS(1);
  const Device gpu = Device::cuda(0);
  const std::vector<float> values = ramp(48, 1.0f);
  const void* pending_block = nullptr;
  Tensor copied;
  testing::hold_compute_stream(gpu, kHold);
  {
    const Tensor source = Tensor::from_vector(values, {48}).pin_memory();
    pending_block = source.data_ptr();
    copied = source.to(gpu, /*non_blocking=*/true);  // queued behind the hold
  }
  std::vector<Tensor> later;  // kept, so that each request needs a block of its own
  for (int i = 0; i < 4; ++i) {
    later.push_back(Tensor::empty_pinned({48}));
    EXPECT_NE(later.back().data_ptr(), pending_block) << "request " << i << " got the block of a pending copy";
    std::fill(later.back().mutable_data(), later.back().mutable_data() + 48, -1.0f);
  }
  EXPECT_EQ(copied.to_vector(), values);
}

TEST(PinnedMemoryCUDA, ABlockWithoutAsynchronousUsesIsReusedAtOnce) {
  TANDEM_REQUIRE_GPUS(1);
  const void* first = nullptr;
  { first = Tensor::empty_pinned({1000}).data_ptr(); }
  const MemoryStats before = pinned_memory_stats();
  for (int i = 0; i < 5; ++i) EXPECT_EQ(Tensor::empty_pinned({1000}).data_ptr(), first);
  EXPECT_EQ(pinned_memory_stats().device_allocations, before.device_allocations);
  EXPECT_GE(before.reserved_bytes, 4000u);
}

TEST(StreamMarker, QueryAndSynchronizeOnTheHostAreImmediate) {
  const StreamMarker marker = StreamMarker::record(Device::cpu(1));
  EXPECT_TRUE(marker.query());
  marker.synchronize();
  EXPECT_TRUE(StreamMarker().query());
}

TEST(StreamMarkerCUDA, QueryTurnsTrueOnceTheMarkedWorkHasRun) {
  TANDEM_REQUIRE_GPUS(1);
  const Device gpu = Device::cuda(0);
  testing::hold_compute_stream(gpu, kHold);
  const StreamMarker marker = StreamMarker::record(gpu);
  EXPECT_FALSE(marker.query()) << "a hold of " << kHold.count() << " ms ended before the host asked";
  marker.synchronize();
  EXPECT_TRUE(marker.query());
}

TEST(WarmUp, NeedsNothingOnCpuDevicesAndRefusesMissingGpus) {
  warm_up({Device::cpu(0), Device::cpu(5)});
  EXPECT_ERROR(warm_up({Device::cpu(0), Device::cuda(cuda_device_count())}), "warm_up: device cuda:");
}

TEST(WarmUpCUDA, LeavesEveryDeviceReadyForProducts) {
  TANDEM_REQUIRE_GPUS(1);
  std::vector<Device> gpus;
  for (int d = 0; d < cuda_device_count(); ++d) gpus.push_back(Device::cuda(d));
  warm_up(gpus);
  warm_up(gpus);  // again: what exists is kept
  for (const Device& gpu : gpus) {
    const Tensor a = Tensor::from_vector({1, 2, 3, 4}, {2, 2}, gpu);
    testing::expect_values(matmul(a, a), {7, 10, 15, 22}, {2, 2});
  }
}

}  // namespace
}  // namespace tandem
