// comm::gather on every device set.
#include "comm/comm_test_helpers.h"

namespace tandem {
namespace {

using testing::expect_equal;
using testing::iota;

class CommGather : public testing::EveryDeviceSet {
 protected:
  // One part per device with `rows[d]` entries along `dim` of a {2, *, 3} shape; part d holds values offset by 100 d.
  std::vector<Tensor> parts(const std::vector<int64_t>& rows, int64_t dim) const {
    std::vector<Tensor> result;
    for (size_t d = 0; d < rows.size(); ++d) {
      Shape shape = {2, 2, 3};
      shape[static_cast<size_t>(dim)] = rows[d];
      result.push_back(iota(shape, devices()[d], 1.0f, 100.0f * static_cast<float>(d)));
    }
    return result;
  }

  // cat on the host is the reference.
  void check(const std::vector<Tensor>& tensors, int64_t dim, std::optional<Device> destination) const {
    const Tensor result = comm::gather(tensors, dim, destination);
    EXPECT_EQ(result.device(), destination.value_or(tensors[0].device()));
    EXPECT_TRUE(result.is_contiguous());
    for (const Tensor& t : tensors) EXPECT_FALSE(result.shares_storage_with(t));
    std::vector<Tensor> on_host;
    for (const Tensor& t : tensors) on_host.push_back(t.to(Device::cpu()));
    expect_equal(result, cat(on_host, dim));
  }
};

TEST_P(CommGather, AlongDim0OntoTheFirstTensorsDevice) {
  const std::vector<int64_t> rows(devices().size(), 2);
  check(parts(rows, 0), 0, std::nullopt);
}

TEST_P(CommGather, UnevenPartsOntoEveryDevice) {
  std::vector<int64_t> rows;
  for (size_t d = 0; d < devices().size(); ++d) rows.push_back(static_cast<int64_t>(d) + 1);
  for (const Device& destination : devices()) check(parts(rows, 0), 0, destination);
  check(parts(rows, 0), 0, Device::cpu(13));
}

TEST_P(CommGather, AlongInnerDimensionsAndNegativeDims) {
  std::vector<int64_t> rows;
  for (size_t d = 0; d < devices().size(); ++d) rows.push_back(3 - static_cast<int64_t>(d));
  check(parts(rows, 1), 1, devices().back());
  check(parts(rows, 1), -2, std::nullopt);
  check(parts(rows, 2), -1, devices()[1]);
}

TEST_P(CommGather, NonContiguousParts) {
  std::vector<Tensor> tensors;
  for (const Device& d : devices()) tensors.push_back(Tensor::randn({3, 4}, d).t());
  check(tensors, 0, std::nullopt);
  check(tensors, 1, devices()[1]);
}

TEST_P(CommGather, OnePartOnTheDestinationIsStillCopied) {
  const Tensor part = iota({2, 2}, devices()[0]);
  check({part}, 0, std::nullopt);
}

TEST_P(CommGather, ZeroElementParts) {
  std::vector<Tensor> tensors;
  for (const Device& d : devices()) tensors.push_back(Tensor::empty({1, 2, 3, 0, 4}, d));
  const Tensor along_empty = comm::gather(tensors, 3);
  EXPECT_EQ(along_empty.shape(), (Shape{1, 2, 3, 0, 4}));
  const Tensor along_rows = comm::gather(tensors, 0, devices()[1]);
  EXPECT_EQ(along_rows.shape(), (Shape{static_cast<int64_t>(devices().size()), 2, 3, 0, 4}));
  EXPECT_EQ(along_rows.device(), devices()[1]);

  // An empty part among non-empty ones.
  std::vector<int64_t> rows(devices().size(), 2);
  rows[0] = 0;
  check(parts(rows, 0), 0, std::nullopt);
}

TEST_P(CommGather, Errors) {
  const std::vector<Device> devs = devices();
  EXPECT_ERROR(comm::gather({}), "comm::gather: got no tensors");
  EXPECT_ERROR(comm::gather({Tensor::ones({3, 5}, devs[0]), Tensor::ones({2, 4}, devs[1])}),
               "comm::gather: tensor 1 has shape [2, 4] but expected [*, 5]");
  EXPECT_ERROR(comm::gather({Tensor::ones({3, 5}, devs[0]), Tensor::ones({3, 4}, devs[1])}, 0),
               "comm::gather: tensor 1 has shape [3, 4] but expected [*, 5]");
  EXPECT_ERROR(comm::gather({Tensor::ones({3, 5}, devs[0]), Tensor::ones({2, 5}, devs[1])}, -1),
               "comm::gather: tensor 1 has shape [2, 5] but expected [3, *]");
  EXPECT_ERROR(comm::gather({Tensor::ones({3, 5}, devs[0]), Tensor::ones({15}, devs[1])}),
               "comm::gather: tensor 1 has 1 dimensions but expected 2");
  EXPECT_ERROR(comm::gather({Tensor::scalar(1.0f, devs[0])}), "comm::gather: cannot gather 0-dim tensors");
  EXPECT_ERROR(comm::gather({Tensor::ones({3}, devs[0])}, 1), "comm::gather: dimension 1 is out of range [-1, 0]");
  EXPECT_ERROR(comm::gather({Tensor::ones({3}, devs[0])}, 0, testing::missing_gpu()),
               "comm::gather: device cuda:7 does not exist");
  EXPECT_ERROR(comm::gather({Tensor::ones({3}, devs[0]), Tensor()}), "comm::gather: tensor 1 is undefined");
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE_SET(CommGather);

}  // namespace
}  // namespace tandem
