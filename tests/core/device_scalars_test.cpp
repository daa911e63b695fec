// DeviceScalars: uploads seen by the work issued after them and not by the work issued before, the host never
// waiting for the device (a slow producer keeps the GPU busy meanwhile), unchanged values not copied again.

#include "tandem/core/device_scalars.h"

#include <string>
#include <vector>

#include "support/test_support.h"

namespace tandem::testing {
namespace {

class DeviceScalarsTest : public EveryDevice {};

// The values of upload `i` of a run: distinct for every i.
std::vector<float> values_of(int i) { return {0.5f * static_cast<float>(i), -3.0f + static_cast<float>(i), 1e-3f}; }

std::vector<double> as_doubles(const std::vector<float>& values) { return {values.begin(), values.end()}; }

// Keeps a GPU's compute stream busy for tens of milliseconds of queued products, so that work enqueued after it has
// certainly not run when the host looks a moment later. Nothing on a CPU device.
void keep_busy(Device device) {
  if (device.is_cpu()) return;
  const Tensor a = Tensor::full({4096, 4096}, 1e-4f, device);
  Tensor product = a;
  for (int i = 0; i < 40; ++i) product = matmul(product, a);
}

TEST_P(DeviceScalarsTest, StartAtZeroAndKeepTheirAddress) {
  DeviceScalars scalars(device(), 3);
  EXPECT_EQ(scalars.values().device(), device());
  EXPECT_EQ(scalars.values().dtype(), DType::Float32);
  expect_values(scalars.values(), {0.0, 0.0, 0.0}, {3}, 0.0, 0.0);
  const void* address = scalars.values().data_ptr();
  scalars.upload(values_of(1));
  expect_values(scalars.values(), as_doubles(values_of(1)), {3}, 0.0, 0.0);
  scalars.upload(values_of(2));
  expect_values(scalars.values(), as_doubles(values_of(2)), {3}, 0.0, 0.0);
  EXPECT_EQ(scalars.values().data_ptr(), address);
}

// More uploads than a handful of staging buffers would hold, all issued while the device is still busy: each clone
// sees the upload before it and not the one after it, and the host never waited for the device.
TEST_P(DeviceScalarsTest, WorkBeforeAnUploadSeesTheEarlierValuesAndTheHostDoesNotWait) {
  DeviceScalars scalars(device(), 3);
  constexpr int kUploads = 12;
  keep_busy(device());
  std::vector<Tensor> seen;  // seen[i]: the values after upload i (none for i = 0)
  for (int i = 0; i < kUploads; ++i) {
    if (i > 0) scalars.upload(values_of(i));
    seen.push_back(scalars.values().clone());
  }
  EXPECT_FALSE(device().is_cuda() && StreamMarker::record(device()).query())
      << "the products queued before the uploads had finished when they returned: an upload waited for the device";
  expect_values(seen[0], {0.0, 0.0, 0.0}, {3}, 0.0, 0.0);
  for (int i = 1; i < kUploads; ++i) {
    SCOPED_TRACE("after upload " + std::to_string(i));
    expect_values(seen[static_cast<size_t>(i)], as_doubles(values_of(i)), {3}, 0.0, 0.0);
  }
}

// Nothing but upload() is meant to write the values; writing them behind its back shows which uploads copy.
TEST_P(DeviceScalarsTest, ValuesEqualToTheLastUploadAreNotCopiedAgain) {
  DeviceScalars scalars(device(), 2);
  Tensor(scalars.values()).fill_(7.0);
  scalars.upload({0.0f, 0.0f});  // the initial zeros
  expect_values(scalars.values(), {7.0, 7.0}, {2}, 0.0, 0.0);
  scalars.upload({1.5f, -2.0f});
  expect_values(scalars.values(), {1.5, -2.0}, {2}, 0.0, 0.0);
  Tensor(scalars.values()).fill_(7.0);
  scalars.upload({1.5f, -2.0f});
  expect_values(scalars.values(), {7.0, 7.0}, {2}, 0.0, 0.0);
  scalars.upload({1.5f, 2.0f});
  expect_values(scalars.values(), {1.5, 2.0}, {2}, 0.0, 0.0);
}

TEST_P(DeviceScalarsTest, RejectsAZeroCountAndAnotherNumberOfValues) {
  EXPECT_ERROR(DeviceScalars(device(), 0), "DeviceScalars: got a count of 0 but expected at least one value");
  DeviceScalars scalars(device(), 2);
  EXPECT_ERROR(scalars.upload({1.0f}), "DeviceScalars::upload: got 1 values but expected 2");
  EXPECT_ERROR(scalars.upload({1.0f, 2.0f, 3.0f}), "DeviceScalars::upload: got 3 values but expected 2");
  expect_values(scalars.values(), {0.0, 0.0}, {2}, 0.0, 0.0);
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(DeviceScalarsTest);

TEST(DeviceScalars, OnAVirtualCpuDeviceAndOnAMissingGpu) {
  DeviceScalars scalars(Device::cpu(1), 2);
  scalars.upload({1.5f, -2.0f});
  EXPECT_EQ(scalars.values().device(), Device::cpu(1));
  expect_values(scalars.values(), {1.5, -2.0}, {2}, 0.0, 0.0);
  const Device missing = Device::cuda(cuda_device_count());
  EXPECT_ERROR(DeviceScalars(missing, 2), "device " + missing.str() + " does not exist");
}

// The copy runs on the scalars' own GPU, not on the current one (cuda:0).
TEST(DeviceScalarsMultiCUDA, UploadToTheSecondGpu) {
  TANDEM_REQUIRE_GPUS(2);
  DeviceScalars scalars(Device::cuda(1), 3);
  keep_busy(Device::cuda(1));
  scalars.upload(values_of(4));
  const Tensor seen = scalars.values().clone();
  scalars.upload(values_of(5));
  EXPECT_EQ(scalars.values().device(), Device::cuda(1));
  expect_values(seen, as_doubles(values_of(4)), {3}, 0.0, 0.0);
  expect_values(scalars.values(), as_doubles(values_of(5)), {3}, 0.0, 0.0);
}

}  // namespace
}  // namespace tandem::testing
