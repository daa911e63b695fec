// comm::broadcast_coalesced on every device set.
#include "comm/comm_test_helpers.h"

namespace tandem {
namespace {

using testing::expect_equal;
using testing::iota;

class CommBroadcastCoalesced : public testing::EveryDeviceSet {
 protected:
  // Tensors of 96, 40, 400, 0, 16, 32 and 4 bytes; one of them a transposed view.
  std::vector<Tensor> mixed_tensors() const {
    const Device source = devices()[0];
    return {iota({4, 6}, source), iota({10}, source, 2.0f), iota({10, 10}, source, -1.0f, 3.0f),
            Tensor::empty({1, 2, 3, 0, 4}, source), iota({2, 2}, source, 1.0f, 7.0f).t(),
            Tensor::randn({8}, source), Tensor::scalar(4.0f, source)};
  }

  void check(const std::vector<Tensor>& tensors, size_t buffer_size) const {
    const std::vector<Device> devs = devices();
    const std::vector<std::vector<Tensor>> results = comm::broadcast_coalesced(tensors, devs, buffer_size);
    ASSERT_EQ(results.size(), devs.size());
    for (size_t d = 0; d < devs.size(); ++d) {
      ASSERT_EQ(results[d].size(), tensors.size());
      for (size_t i = 0; i < tensors.size(); ++i) {
        SCOPED_TRACE("device " + devs[d].str() + ", tensor " + std::to_string(i));
        EXPECT_EQ(results[d][i].device(), devs[d]);
        expect_equal(results[d][i], tensors[i]);
        if (d == 0) {
          EXPECT_TRUE(results[0][i].is_same(tensors[i]));
          continue;
        }
        EXPECT_TRUE(results[d][i].is_contiguous());
        for (size_t j = 0; j < i; ++j) {
          if (results[d][i].numel() > 0 && results[d][j].numel() > 0) {
            EXPECT_FALSE(results[d][i].shares_storage_with(results[d][j])) << "aliases tensor " << j;
          }
        }
      }
    }
  }
};

TEST_P(CommBroadcastCoalesced, DefaultBufferSize) { check(mixed_tensors(), comm::kDefaultBufferSize); }

// buffer_size has no effect (Note [Coalesced calls are one collective] in comm/src/coalesced.cpp): sizes smaller than
// the tensors give the same copies.
TEST_P(CommBroadcastCoalesced, AnyBufferSizeGivesTheSameCopies) {
  check(mixed_tensors(), 100);
  check(mixed_tensors(), 0);
}

// More tensors than NCCL takes operations in one group (Collective::kMaxGroupOperations over the ranks), all in one
// call: tensor i holds i everywhere.
TEST_P(CommBroadcastCoalesced, MoreTensorsThanOneNcclGroupHolds) {
  constexpr int kTensors = 2500;
  std::vector<Tensor> tensors;
  for (int i = 0; i < kTensors; ++i) tensors.push_back(Tensor::full({2}, static_cast<float>(i), devices()[0]));
  const std::vector<std::vector<Tensor>> results = comm::broadcast_coalesced(tensors, devices());
  for (size_t d = 1; d < results.size(); ++d) {
    ASSERT_EQ(results[d].size(), static_cast<size_t>(kTensors));
    const std::vector<float> values = cat(results[d], 0).to(Device::cpu()).to_vector();  // one transfer
    for (size_t k = 0; k < values.size(); ++k) {
      ASSERT_EQ(values[k], static_cast<float>(k / 2)) << "tensor " << k / 2 << " on " << devices()[d];
    }
  }
}

TEST_P(CommBroadcastCoalesced, NoTensors) {
  const std::vector<std::vector<Tensor>> results = comm::broadcast_coalesced({}, devices());
  ASSERT_EQ(results.size(), devices().size());
  for (const std::vector<Tensor>& list : results) EXPECT_TRUE(list.empty());
}

TEST_P(CommBroadcastCoalesced, Errors) {
  const std::vector<Device> devs = devices();
  const std::vector<Tensor> tensors = {Tensor::ones({2}, devs[0]), Tensor::ones({3}, devs[1])};
  EXPECT_ERROR(comm::broadcast_coalesced(tensors, devs),
               "comm::broadcast_coalesced: tensor 1 is on " + devs[1].str() + " but expected " + devs[0].str());
  EXPECT_ERROR(comm::broadcast_coalesced({tensors[0]}, {}), "comm::broadcast_coalesced: got an empty list of devices");
  EXPECT_ERROR(comm::broadcast_coalesced({tensors[0]}, {devs[0], testing::missing_gpu()}),
               "comm::broadcast_coalesced: device cuda:7 does not exist");
  EXPECT_ERROR(comm::broadcast_coalesced({tensors[0], Tensor()}, devs),
               "comm::broadcast_coalesced: tensor 1 is undefined");
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE_SET(CommBroadcastCoalesced);

}  // namespace
}  // namespace tandem
