// comm::reduce_add on every device set.
#include "comm/comm_test_helpers.h"

namespace tandem {
namespace {

using testing::expect_values;
using testing::float64_sum;
using testing::iota;

class CommReduceAdd : public testing::EveryDeviceSet {
 protected:
  std::vector<Tensor> random_inputs(const Shape& shape) const {
    std::vector<Tensor> inputs;
    for (const Device& d : devices()) inputs.push_back(Tensor::randn(shape, d));
    return inputs;
  }
};

TEST_P(CommReduceAdd, SumsOntoTheFirstInputsDeviceByDefault) {
  const std::vector<Tensor> inputs = random_inputs({5, 5});
  const Tensor sum = comm::reduce_add(inputs);
  EXPECT_EQ(sum.device(), devices()[0]);
  EXPECT_TRUE(sum.is_contiguous());
  expect_values(sum, float64_sum(inputs), {5, 5});
  for (const Tensor& input : inputs) EXPECT_FALSE(sum.shares_storage_with(input));
}

TEST_P(CommReduceAdd, OntoAnyDeviceThatHoldsAnInput) {
  const std::vector<Tensor> inputs = random_inputs({33});
  for (const Device& destination : devices()) {
    const Tensor sum = comm::reduce_add(inputs, destination);
    EXPECT_EQ(sum.device(), destination);
    expect_values(sum, float64_sum(inputs), {33});
  }
}

// tandem: the destination need not hold an input (a CUDA reduce goes through an input's device and a copy).
TEST_P(CommReduceAdd, OntoADeviceThatHoldsNoInput) {
  const std::vector<Tensor> inputs = random_inputs({4, 9});
  const Tensor sum = comm::reduce_add(inputs, Device::cpu(9));
  EXPECT_EQ(sum.device(), Device::cpu(9));
  expect_values(sum, float64_sum(inputs), {4, 9});

  const std::vector<Tensor> all_but_first(inputs.begin() + 1, inputs.end());
  const Tensor elsewhere = comm::reduce_add(all_but_first, devices()[0]);
  EXPECT_EQ(elsewhere.device(), devices()[0]);
  expect_values(elsewhere, float64_sum(all_but_first), {4, 9});
}

TEST_P(CommReduceAdd, ASingleInputIsReturnedItself) {
  const Tensor input = iota({3}, devices()[1]);
  EXPECT_TRUE(comm::reduce_add({input}).is_same(input));
  EXPECT_TRUE(comm::reduce_add({input}, devices()[1]).is_same(input));
  const Tensor moved = comm::reduce_add({input}, devices()[0]);
  EXPECT_EQ(moved.device(), devices()[0]);
  expect_values(moved, {0, 1, 2}, {3});
}

TEST_P(CommReduceAdd, NonContiguousInputs) {
  std::vector<Tensor> inputs;
  for (const Device& d : devices()) inputs.push_back(Tensor::randn({6, 4}, d).t());
  expect_values(comm::reduce_add(inputs), float64_sum(inputs), {4, 6});
}

TEST_P(CommReduceAdd, ZeroElementInputs) {
  std::vector<Tensor> inputs;
  for (const Device& d : devices()) inputs.push_back(Tensor::empty({1, 2, 3, 0, 4}, d));
  const Tensor sum = comm::reduce_add(inputs, devices()[1]);
  EXPECT_EQ(sum.shape(), (Shape{1, 2, 3, 0, 4}));
  EXPECT_EQ(sum.device(), devices()[1]);
}

TEST_P(CommReduceAdd, Errors) {
  const std::vector<Device> devs = devices();
  EXPECT_ERROR(comm::reduce_add({}), "comm::reduce_add: got no inputs");
  EXPECT_ERROR(comm::reduce_add({Tensor::ones({5, 5}, devs[0]), Tensor::ones({5, 4}, devs[1])}),
               "comm::reduce_add: input 1 has shape [5, 4] but expected [5, 5]");
  EXPECT_ERROR(comm::reduce_add({Tensor::ones({2}, devs[1]), Tensor::ones({2}, devs[0]), Tensor::ones({2}, devs[1])}),
               "comm::reduce_add: device " + devs[1].str() + " appears twice (inputs 0 and 2)");
  EXPECT_ERROR(comm::reduce_add({Tensor::ones({2}, devs[0]), Tensor::ones({2}, devs[1])}, testing::missing_gpu()),
               "comm::reduce_add: device cuda:7 does not exist");
  EXPECT_ERROR(comm::reduce_add({Tensor::ones({2}, devs[0]), Tensor()}), "comm::reduce_add: input 1 is undefined");
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE_SET(CommReduceAdd);

}  // namespace
}  // namespace tandem
