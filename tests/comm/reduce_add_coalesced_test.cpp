// comm::reduce_add_coalesced on every device set.
#include "comm/comm_test_helpers.h"

namespace tandem {
namespace {

using testing::expect_values;
using testing::float64_sum;

class CommReduceAddCoalesced : public testing::EveryDeviceSet {
 protected:
  // inputs[d][i]: shapes {3, 4}, {10}, {1, 2, 3, 0, 4}, {5, 5} (transposed view), {} and {40} on device d.
  std::vector<std::vector<Tensor>> random_lists() const {
    std::vector<std::vector<Tensor>> inputs;
    for (const Device& d : devices()) {
      inputs.push_back({Tensor::randn({3, 4}, d), Tensor::randn({10}, d), Tensor::empty({1, 2, 3, 0, 4}, d),
                        Tensor::randn({5, 5}, d).t(), Tensor::randn({}, d), Tensor::randn({40}, d)});
    }
    return inputs;
  }

  void check(const std::vector<std::vector<Tensor>>& inputs, std::optional<Device> destination,
             size_t buffer_size) const {
    const std::vector<Tensor> sums = comm::reduce_add_coalesced(inputs, destination, buffer_size);
    ASSERT_EQ(sums.size(), inputs[0].size());
    for (size_t i = 0; i < sums.size(); ++i) {
      SCOPED_TRACE("tensor " + std::to_string(i));
      std::vector<Tensor> column;
      for (const std::vector<Tensor>& list : inputs) column.push_back(list[i]);
      EXPECT_EQ(sums[i].device(), destination.value_or(devices()[0]));
      EXPECT_TRUE(sums[i].is_contiguous());
      expect_values(sums[i], float64_sum(column), inputs[0][i].shape());
      if (sums[i].numel() == 0) continue;
      for (const Tensor& input : column) EXPECT_FALSE(sums[i].shares_storage_with(input));
      for (size_t j = 0; j < i; ++j) {
        if (sums[j].numel() > 0) EXPECT_FALSE(sums[i].shares_storage_with(sums[j])) << "aliases tensor " << j;
      }
    }
  }
};

TEST_P(CommReduceAddCoalesced, DefaultBufferSize) { check(random_lists(), std::nullopt, comm::kDefaultBufferSize); }

// buffer_size has no effect (Note [Coalesced calls are one collective] in comm/src/coalesced.cpp): sizes smaller than
// the tensors give the same sums.
TEST_P(CommReduceAddCoalesced, AnyBufferSizeGivesTheSameSums) {
  check(random_lists(), devices().back(), 110);
  check(random_lists(), devices()[1], 0);
}

// More tensors than NCCL takes operations in one group (Collective::kMaxGroupOperations over the ranks), all in one
// call: tensor i of list d holds (d + 1) * i, so sum i is n (n + 1) / 2 * i.
TEST_P(CommReduceAddCoalesced, MoreTensorsThanOneNcclGroupHolds) {
  constexpr int kTensors = 2500;
  std::vector<std::vector<Tensor>> inputs;
  for (size_t d = 0; d < devices().size(); ++d) {
    inputs.emplace_back();
    for (int i = 0; i < kTensors; ++i) {
      inputs.back().push_back(Tensor::full({3}, static_cast<float>((d + 1) * static_cast<size_t>(i)), devices()[d]));
    }
  }
  const auto n = static_cast<float>(devices().size());
  const std::vector<Tensor> sums = comm::reduce_add_coalesced(inputs, devices()[1]);
  ASSERT_EQ(sums.size(), static_cast<size_t>(kTensors));
  const Tensor all = cat(sums, 0).to(Device::cpu());  // one transfer
  const std::vector<float> values = all.to_vector();
  for (size_t k = 0; k < values.size(); ++k) {
    ASSERT_EQ(values[k], n * (n + 1.0f) / 2.0f * static_cast<float>(k / 3)) << "tensor " << k / 3;
  }
}

TEST_P(CommReduceAddCoalesced, DestinationHoldingNoList) { check(random_lists(), Device::cpu(11), 64); }

TEST_P(CommReduceAddCoalesced, ASingleListIsReturnedItself) {
  const std::vector<Tensor> list = random_lists()[0];
  const std::vector<Tensor> sums = comm::reduce_add_coalesced({list});
  for (size_t i = 0; i < list.size(); ++i) EXPECT_TRUE(sums[i].is_same(list[i]));
}

TEST_P(CommReduceAddCoalesced, EmptyLists) {
  EXPECT_TRUE(comm::reduce_add_coalesced(std::vector<std::vector<Tensor>>(devices().size())).empty());
}

TEST_P(CommReduceAddCoalesced, Errors) {
  const std::vector<Device> devs = devices();
  constexpr const char* fn = "comm::reduce_add_coalesced: ";
  const auto ones = [](const Shape& shape, Device d) { return Tensor::ones(shape, d); };
  EXPECT_ERROR(comm::reduce_add_coalesced({}), std::string(fn) + "got no input lists");
  EXPECT_ERROR(comm::reduce_add_coalesced({{ones({2}, devs[0]), ones({3}, devs[0])}, {ones({2}, devs[1])}}),
               std::string(fn) + "list 1 has 1 tensors but expected 2");
  EXPECT_ERROR(comm::reduce_add_coalesced({{ones({2}, devs[0]), ones({3}, devs[0])},
                                           {ones({2}, devs[1]), ones({4}, devs[1])}}),
               std::string(fn) + "tensor 1 of list 1 has shape [4] but expected [3]");
  EXPECT_ERROR(comm::reduce_add_coalesced({{ones({2}, devs[0]), ones({3}, devs[1])},
                                           {ones({2}, devs[1]), ones({3}, devs[1])}}),
               std::string(fn) + "tensor 1 of list 0 is on " + devs[1].str() + " but expected " + devs[0].str());
  EXPECT_ERROR(comm::reduce_add_coalesced({{ones({2}, devs[0])}, {ones({2}, devs[0])}}),
               std::string(fn) + "device " + devs[0].str() + " appears twice (lists 0 and 1)");
  EXPECT_ERROR(comm::reduce_add_coalesced({{ones({2}, devs[0])}, {ones({2}, devs[1])}}, testing::missing_gpu()),
               std::string(fn) + "device cuda:7 does not exist");
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE_SET(CommReduceAddCoalesced);

}  // namespace
}  // namespace tandem
