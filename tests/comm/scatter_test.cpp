// comm::scatter on every device set.
#include "comm/comm_test_helpers.h"

namespace tandem {
namespace {

using testing::expect_equal;
using testing::iota;

class CommScatter : public testing::EveryDeviceSet {
 protected:
  // Checks that chunk i is on devices[i], equals the matching slice of `source`, is a view of `source` when on its
  // device, and a contiguous copy otherwise.
  void check(const std::vector<Tensor>& chunks, const Tensor& source, const std::vector<Device>& devs,
             const std::vector<int64_t>& expected_sizes, int64_t dim) const {
    ASSERT_EQ(chunks.size(), expected_sizes.size());
    int64_t start = 0;
    for (size_t i = 0; i < chunks.size(); ++i) {
      SCOPED_TRACE("chunk " + std::to_string(i));
      EXPECT_EQ(chunks[i].device(), devs[i]);
      EXPECT_EQ(chunks[i].size(dim), expected_sizes[i]);
      expect_equal(chunks[i], source.narrow(dim, start, expected_sizes[i]));
      if (devs[i] == source.device()) {
        EXPECT_TRUE(chunks[i].shares_storage_with(source));
        if (chunks[i].numel() > 0) {
          EXPECT_EQ(chunks[i].data_ptr(), source.narrow(dim, start, expected_sizes[i]).data_ptr());
        }
      } else {
        EXPECT_TRUE(chunks[i].is_contiguous());
        EXPECT_FALSE(chunks[i].shares_storage_with(source));
      }
      start += expected_sizes[i];
    }
  }
};

TEST_P(CommScatter, EvenChunksAlongDim0) {
  const std::vector<Device> devs = devices();
  const int64_t n = static_cast<int64_t>(devs.size());
  const Tensor source = iota({2 * n, 3}, devs[0]);
  check(comm::scatter(source, devs), source, devs, std::vector<int64_t>(devs.size(), 2), 0);
}

TEST_P(CommScatter, UnevenChunksFollowChunkRules) {
  const std::vector<Device> devs = devices();
  const Tensor source = iota({7, 2}, devs[0]);
  const std::vector<int64_t> sizes = devs.size() == 2 ? std::vector<int64_t>{4, 3} : std::vector<int64_t>{3, 3, 1};
  check(comm::scatter(source, devs), source, devs, sizes, 0);
}

TEST_P(CommScatter, FewerChunksThanDevices) {
  const std::vector<Device> devs = devices();
  const Tensor one_row = iota({1, 4}, devs[1]);
  check(comm::scatter(one_row, devs), one_row, devs, {1}, 0);

  // 13 rows over 6 devices: chunks of ceil(13 / 6) = 3 rows, so only 5 chunks (3, 3, 3, 3, 1).
  std::vector<Device> six;
  for (size_t i = 0; i < 6; ++i) six.push_back(devs[i % devs.size()]);
  const Tensor thirteen = iota({13}, devs[0]);
  check(comm::scatter(thirteen, six), thirteen, six, {3, 3, 3, 3, 1}, 0);
}

TEST_P(CommScatter, ChunkSizesMayBeZero) {
  const std::vector<Device> devs = devices();
  const Tensor source = iota({6, 2}, devs[0]);
  std::vector<int64_t> sizes(devs.size(), 0);
  sizes[0] = 2;
  sizes.back() = 4;
  check(comm::scatter(source, devs, sizes), source, devs, sizes, 0);
}

TEST_P(CommScatter, AlongAnInnerDimensionAndNegativeDims) {
  const std::vector<Device> devs = devices();
  const Tensor source = iota({3, 2 * static_cast<int64_t>(devs.size()), 2}, devs[0]);
  const std::vector<int64_t> sizes(devs.size(), 2);
  check(comm::scatter(source, devs, {}, 1), source, devs, sizes, 1);
  check(comm::scatter(source, devs, {}, -2), source, devs, sizes, 1);
  check(comm::scatter(source, devs, sizes, -2), source, devs, sizes, 1);
}

TEST_P(CommScatter, FromADeviceThatGetsNoChunk) {
  const std::vector<Device> devs = devices();
  const std::vector<Device> others(devs.begin() + 1, devs.end());
  const Tensor source = iota({4 * static_cast<int64_t>(others.size())}, devs[0]);
  check(comm::scatter(source, others), source, others, std::vector<int64_t>(others.size(), 4), 0);
}

TEST_P(CommScatter, ZeroElementTensors) {
  const std::vector<Device> devs = devices();
  const Tensor source = Tensor::empty({1, 2, 3, 0, 4}, devs[0]);
  const std::vector<Tensor> chunks = comm::scatter(source, devs, {}, 3);
  ASSERT_EQ(chunks.size(), devs.size());
  for (size_t i = 0; i < chunks.size(); ++i) {
    EXPECT_EQ(chunks[i].device(), devs[i]);
    EXPECT_EQ(chunks[i].shape(), (Shape{1, 2, 3, 0, 4}));
  }
  const std::vector<Tensor> rows = comm::scatter(source, {devs[1]});
  ASSERT_EQ(rows.size(), 1u);
  EXPECT_EQ(rows[0].shape(), (Shape{1, 2, 3, 0, 4}));
  EXPECT_EQ(rows[0].device(), devs[1]);
}

TEST_P(CommScatter, Errors) {
  const std::vector<Device> devs = devices();
  const Tensor source = Tensor::ones({6, 2}, devs[0]);
  EXPECT_ERROR(comm::scatter(source, {}), "comm::scatter: got an empty list of devices");
  EXPECT_ERROR(comm::scatter(source, {devs[0], testing::missing_gpu()}), "comm::scatter: device cuda:7 does not exist");
  EXPECT_ERROR(comm::scatter(source, {devs[0], devs[1]}, {1, 2, 3}), "comm::scatter: got 3 chunk sizes for 2 devices");
  EXPECT_ERROR(comm::scatter(source, {devs[0], devs[1]}, {3, 4}),
               "comm::scatter: chunk_sizes sum to 7 but dim 0 has size 6");
  EXPECT_ERROR(comm::scatter(source, {devs[0], devs[1]}, {1, 2}, -1),
               "comm::scatter: chunk_sizes sum to 3 but dim 1 has size 2");
  EXPECT_ERROR(comm::scatter(source, {devs[0], devs[1]}, {8, -2}),
               "comm::scatter: chunk_sizes[1] is -2 but expected >= 0");
  EXPECT_ERROR(comm::scatter(source, {devs[0], devs[1]}, {INT64_MAX, 2}),
               "comm::scatter: chunk_sizes sum to more than 2^63 - 1");
  EXPECT_ERROR(comm::scatter(Tensor::scalar(1.0f, devs[0]), devs), "comm::scatter: cannot scatter a 0-dim tensor");
  EXPECT_ERROR(comm::scatter(source, devs, {}, 2), "comm::scatter: dimension 2 is out of range [-2, 1]");
  EXPECT_ERROR(comm::scatter(source, devs, {}, -3), "comm::scatter: dimension -3 is out of range [-2, 1]");
  EXPECT_ERROR(comm::scatter(Tensor(), devs), "comm::scatter: tensor is undefined");
}

// A batch's features and targets scattered together: each as scatter cuts it, from sources on different devices.
TEST_P(CommScatter, AllScattersEachTensorAsScatterDoes) {
  const std::vector<Device> devs = devices();
  const Tensor features = iota({7, 3}, devs[0]);
  const Tensor targets = iota({7}, devs.back());
  const std::vector<std::vector<Tensor>> chunks = comm::scatter_all({features, targets}, devs);
  ASSERT_EQ(chunks.size(), 2u);
  const std::vector<int64_t> sizes = devs.size() == 2 ? std::vector<int64_t>{4, 3} : std::vector<int64_t>{3, 3, 1};
  check(chunks[0], features, devs, sizes, 0);
  check(chunks[1], targets, devs, sizes, 0);
  EXPECT_TRUE(comm::scatter_all({}, devs).empty());
  EXPECT_ERROR(comm::scatter_all({features, Tensor()}, devs), "comm::scatter_all: tensor is undefined");
  EXPECT_ERROR(comm::scatter_all({features, Tensor::scalar(1.0f, devs[0])}, devs),
               "comm::scatter_all: cannot scatter a 0-dim tensor");
  EXPECT_ERROR(comm::scatter_all({features}, {}), "comm::scatter_all: got an empty list of devices");
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE_SET(CommScatter);

}  // namespace
}  // namespace tandem
