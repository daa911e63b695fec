// Tensors over 100 MB through every comm function that moves them: broadcast, reduce_add, all_reduce, scatter and
// gather. Values are small integers so that every result, sums included, is exact in float32.
#include "comm/comm_test_helpers.h"

namespace tandem {
namespace {

constexpr int64_t kLarge = 26'500'000;  // 106 MB of float32

float pattern(int64_t i) { return static_cast<float>(i % 1000); }

Tensor large_tensor(Device device) {
  std::vector<float> values(static_cast<size_t>(kLarge));
  for (int64_t i = 0; i < kLarge; ++i) values[static_cast<size_t>(i)] = pattern(i);
  return Tensor::from_vector(values, {kLarge}, device);
}

// Expects t[i] == factor * pattern(first + i) for every i, reporting the first mismatch only.
void expect_pattern(const Tensor& t, float factor, int64_t first = 0) {
  const std::vector<float> values = t.to_vector();
  for (size_t i = 0; i < values.size(); ++i) {
    const float expected = factor * pattern(first + static_cast<int64_t>(i));
    ASSERT_EQ(values[i], expected) << "at index " << i << " on " << t.device();
  }
}

class CommLargeTensors : public testing::EveryDeviceSet {};

TEST_P(CommLargeTensors, BroadcastReduceAllReduceScatterGather) {
  if (GetParam() == testing::DeviceSet::CPU3) GTEST_SKIP() << "CPU devices run this once, in the CPU2 instance";
  const std::vector<Device> devs = devices();
  const float n = static_cast<float>(devs.size());

  std::vector<Tensor> copies = comm::broadcast(large_tensor(devs[0]), devs);
  for (const Tensor& copy : copies) expect_pattern(copy, 1.0f);

  expect_pattern(comm::reduce_add(copies, devs.back()), n);

  comm::all_reduce(copies);
  for (const Tensor& copy : copies) expect_pattern(copy, n);

  const std::vector<Tensor> chunks = comm::scatter(copies[0], devs);
  ASSERT_EQ(chunks.size(), devs.size());
  int64_t first = 0;
  for (size_t d = 0; d < chunks.size(); ++d) {
    EXPECT_EQ(chunks[d].device(), devs[d]);
    expect_pattern(chunks[d], n, first);
    first += chunks[d].numel();
  }
  EXPECT_EQ(first, kLarge);
  expect_pattern(comm::gather(chunks, 0, devs.back()), n);
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE_SET(CommLargeTensors);

}  // namespace
}  // namespace tandem
