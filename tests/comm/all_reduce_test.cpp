// comm::all_reduce on every device set.
#include "comm/comm_test_helpers.h"

namespace tandem {
namespace {

using testing::expect_values;
using testing::float64_sum;

class CommAllReduce : public testing::EveryDeviceSet {};

TEST_P(CommAllReduce, EveryTensorBecomesTheSumInPlace) {
  std::vector<Tensor> tensors;
  for (const Device& d : devices()) tensors.push_back(Tensor::randn({7, 3}, d));
  const std::vector<double> expected = float64_sum(tensors);
  std::vector<const void*> addresses;
  for (const Tensor& t : tensors) addresses.push_back(t.data_ptr());
  const std::vector<Tensor> handles = tensors;

  comm::all_reduce(tensors);
  for (size_t d = 0; d < tensors.size(); ++d) {
    EXPECT_TRUE(tensors[d].is_same(handles[d]));
    EXPECT_EQ(tensors[d].data_ptr(), addresses[d]);
    EXPECT_EQ(tensors[d].device(), devices()[d]);
    expect_values(tensors[d], expected, {7, 3});
  }
}

TEST_P(CommAllReduce, NonContiguousTensorsAreUpdatedInPlace) {
  std::vector<Tensor> bases;
  std::vector<Tensor> tensors;
  for (const Device& d : devices()) {
    bases.push_back(Tensor::randn({4, 6}, d));
    tensors.push_back(bases.back().t());
  }
  const std::vector<double> expected = float64_sum(tensors);
  comm::all_reduce(tensors);
  for (size_t d = 0; d < tensors.size(); ++d) {
    expect_values(tensors[d], expected, {6, 4});
    expect_values(bases[d].t(), expected, {6, 4});  // written through the view into the original storage
  }
}

TEST_P(CommAllReduce, OneTensorAndZeroElementTensorsAreLeftAlone) {
  std::vector<Tensor> one = {Tensor::full({3}, 2.0f, devices()[0])};
  comm::all_reduce(one);
  expect_values(one[0], {2, 2, 2}, {3});

  std::vector<Tensor> empty;
  for (const Device& d : devices()) empty.push_back(Tensor::empty({1, 2, 3, 0, 4}, d));
  comm::all_reduce(empty);
  for (const Tensor& t : empty) EXPECT_EQ(t.shape(), (Shape{1, 2, 3, 0, 4}));
}

TEST_P(CommAllReduce, Errors) {
  const std::vector<Device> devs = devices();
  std::vector<Tensor> none;
  EXPECT_ERROR(comm::all_reduce(none), "comm::all_reduce: got no tensors");
  std::vector<Tensor> shapes = {Tensor::ones({5, 5}, devs[0]), Tensor::ones({5, 4}, devs[1])};
  EXPECT_ERROR(comm::all_reduce(shapes), "comm::all_reduce: tensor 1 has shape [5, 4] but expected [5, 5]");
  std::vector<Tensor> same = {Tensor::ones({2}, devs[0]), Tensor::ones({2}, devs[0])};
  EXPECT_ERROR(comm::all_reduce(same),
               "comm::all_reduce: device " + devs[0].str() + " appears twice (tensors 0 and 1)");
  std::vector<Tensor> undefined = {Tensor::ones({2}, devs[0]), Tensor()};
  EXPECT_ERROR(comm::all_reduce(undefined), "comm::all_reduce: tensor 1 is undefined");
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE_SET(CommAllReduce);

}  // namespace
}  // namespace tandem
