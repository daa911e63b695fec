// comm::broadcast on every device set.
#include "comm/comm_test_helpers.h"

namespace tandem {
namespace {

using testing::expect_equal;
using testing::iota;

class CommBroadcast : public testing::EveryDeviceSet {};

TEST_P(CommBroadcast, EveryDeviceGetsAnEqualTensor) {
  const std::vector<Device> devs = devices();
  const Tensor source = Tensor::randn({5, 7}, devs[0]);
  const std::vector<Tensor> copies = comm::broadcast(source, devs);
  ASSERT_EQ(copies.size(), devs.size());
  for (size_t d = 0; d < devs.size(); ++d) {
    EXPECT_EQ(copies[d].device(), devs[d]);
    expect_equal(copies[d], source);
  }
}

TEST_P(CommBroadcast, SourceDeviceEntryIsTheTensorItselfAndOthersAreNewContiguousTensors) {
  const std::vector<Device> devs = devices();
  const Tensor source = iota({4, 3}, devs[0]);
  const std::vector<Tensor> copies = comm::broadcast(source, devs);
  EXPECT_TRUE(copies[0].is_same(source));
  EXPECT_EQ(copies[0].data_ptr(), source.data_ptr());
  for (size_t d = 1; d < devs.size(); ++d) {
    EXPECT_FALSE(copies[d].shares_storage_with(source));
    EXPECT_TRUE(copies[d].is_contiguous());
    for (size_t e = 1; e < d; ++e) EXPECT_FALSE(copies[d].shares_storage_with(copies[e]));
  }
}

TEST_P(CommBroadcast, SourceMayBeAnyEntryOrNoEntry) {
  const std::vector<Device> devs = devices();
  const Tensor source = iota({6}, devs.back(), 0.5f, -1.0f);
  const std::vector<Tensor> all = comm::broadcast(source, devs);
  EXPECT_TRUE(all.back().is_same(source));
  for (const Tensor& copy : all) expect_equal(copy, source);

  const std::vector<Device> others(devs.begin(), devs.end() - 1);
  const std::vector<Tensor> elsewhere = comm::broadcast(source, others);
  ASSERT_EQ(elsewhere.size(), others.size());
  for (size_t d = 0; d < others.size(); ++d) {
    EXPECT_EQ(elsewhere[d].device(), others[d]);
    EXPECT_FALSE(elsewhere[d].shares_storage_with(source));
    expect_equal(elsewhere[d], source);
  }
}

TEST_P(CommBroadcast, NonContiguousSourceGivesContiguousCopies) {
  const std::vector<Device> devs = devices();
  const Tensor source = iota({3, 5}, devs[0]).t();
  const std::vector<Tensor> copies = comm::broadcast(source, devs);
  EXPECT_TRUE(copies[0].is_same(source));
  for (size_t d = 1; d < devs.size(); ++d) {
    EXPECT_TRUE(copies[d].is_contiguous());
    expect_equal(copies[d], source);
  }
}

TEST_P(CommBroadcast, ADeviceNamedTwiceGetsTwoSeparateCopies) {
  const std::vector<Device> devs = devices();
  const Tensor source = iota({8}, devs[0]);
  const std::vector<Tensor> copies = comm::broadcast(source, {devs[1], devs[0], devs[1], devs[0]});
  EXPECT_TRUE(copies[1].is_same(source));
  EXPECT_TRUE(copies[3].is_same(source));
  EXPECT_FALSE(copies[0].shares_storage_with(copies[2]));
  expect_equal(copies[0], source);
  expect_equal(copies[2], source);
}

TEST_P(CommBroadcast, ZeroElementTensorsKeepTheirShape) {
  const std::vector<Device> devs = devices();
  const Tensor source = Tensor::empty({1, 2, 3, 0, 4}, devs[0]);
  const std::vector<Tensor> copies = comm::broadcast(source, devs);
  for (size_t d = 0; d < devs.size(); ++d) {
    EXPECT_EQ(copies[d].device(), devs[d]);
    EXPECT_EQ(copies[d].shape(), (Shape{1, 2, 3, 0, 4}));
  }
}

TEST_P(CommBroadcast, ScalarTensors) {
  const std::vector<Device> devs = devices();
  const Tensor source = Tensor::scalar(2.5f, devs[0]);
  for (const Tensor& copy : comm::broadcast(source, devs)) {
    EXPECT_EQ(copy.shape(), Shape{});
    EXPECT_EQ(copy.item(), 2.5f);
  }
}

TEST_P(CommBroadcast, Errors) {
  const std::vector<Device> devs = devices();
  const Tensor source = Tensor::ones({2}, devs[0]);
  EXPECT_ERROR(comm::broadcast(source, {}), "comm::broadcast: got an empty list of devices");
  EXPECT_ERROR(comm::broadcast(source, {devs[1], testing::missing_gpu()}),
               "comm::broadcast: device cuda:7 does not exist");
  EXPECT_ERROR(comm::broadcast(source, {Device::cuda(-1)}), "CUDA device index -1 is negative");
  EXPECT_ERROR(comm::broadcast(Tensor(), devs), "comm::broadcast: tensor is undefined");
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE_SET(CommBroadcast);

}  // namespace
}  // namespace tandem
