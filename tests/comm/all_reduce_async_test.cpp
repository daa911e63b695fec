// comm::all_reduce_async and AllReduceWork on every device set.
#include "comm/comm_test_helpers.h"

namespace tandem {
namespace {

using testing::expect_values;
using testing::float64_sum;

class CommAllReduceAsync : public testing::EveryDeviceSet {
 protected:
  std::vector<Tensor> random_tensors() const {
    std::vector<Tensor> tensors;
    for (const Device& d : devices()) tensors.push_back(Tensor::randn({5, 3}, d));
    return tensors;
  }

  static std::vector<StreamMarker> markers_for(const std::vector<Tensor>& tensors) {
    std::vector<StreamMarker> markers;
    for (const Tensor& t : tensors) markers.push_back(StreamMarker::record(t.device()));
    return markers;
  }
};

TEST_P(CommAllReduceAsync, EveryTensorHoldsTheSumInPlaceOnceJoined) {
  std::vector<Tensor> tensors = random_tensors();
  const std::vector<double> expected = float64_sum(tensors);
  const std::vector<Tensor> handles = tensors;
  comm::AllReduceWork work = comm::all_reduce_async(tensors, markers_for(tensors));
  EXPECT_TRUE(work.pending());
  work.wait();
  EXPECT_FALSE(work.pending());
  work.wait();  // joined already: nothing to do
  for (size_t d = 0; d < tensors.size(); ++d) {
    EXPECT_TRUE(tensors[d].is_same(handles[d]));
    EXPECT_EQ(tensors[d].device(), devices()[d]);
    expect_values(tensors[d], expected, {5, 3});
  }
}

TEST_P(CommAllReduceAsync, DestroyingOrReplacingAWorkJoinsIt) {
  std::vector<Tensor> first = random_tensors();
  std::vector<Tensor> second = random_tensors();
  const std::vector<double> first_sum = float64_sum(first);
  const std::vector<double> second_sum = float64_sum(second);
  {
    comm::AllReduceWork work = comm::all_reduce_async(first, markers_for(first));
    comm::AllReduceWork moved = std::move(work);
    EXPECT_FALSE(work.pending());  // NOLINT(bugprone-use-after-move): a moved-from work holds nothing
    EXPECT_TRUE(moved.pending());
    moved = comm::all_reduce_async(second, markers_for(second));  // joins the first
    EXPECT_TRUE(moved.pending());
  }
  for (size_t d = 0; d < first.size(); ++d) {
    expect_values(first[d], first_sum, {5, 3});
    expect_values(second[d], second_sum, {5, 3});
  }
}

TEST_P(CommAllReduceAsync, OneTensorAndZeroElementTensorsLeaveNothingToJoin) {
  std::vector<Tensor> one = {Tensor::full({3}, 2.0f, devices()[0])};
  EXPECT_FALSE(comm::all_reduce_async(one, markers_for(one)).pending());
  expect_values(one[0], {2, 2, 2}, {3});

  std::vector<Tensor> empty;
  for (const Device& d : devices()) empty.push_back(Tensor::empty({2, 0}, d));
  EXPECT_FALSE(comm::all_reduce_async(empty, markers_for(empty)).pending());
}

TEST_P(CommAllReduceAsync, Errors) {
  const std::vector<Device> devs = devices();
  std::vector<Tensor> tensors = {Tensor::ones({4}, devs[0]), Tensor::ones({4}, devs[1])};
  const std::vector<StreamMarker> markers = markers_for(tensors);
  EXPECT_ERROR(comm::all_reduce_async(tensors, {markers[0]}), "comm::all_reduce_async: got 1 markers for 2 tensors");
  EXPECT_ERROR(comm::all_reduce_async(tensors, {markers[1], markers[0]}),
               "comm::all_reduce_async: marker 0 is on " + devs[1].str() + " but tensor 0 is on " + devs[0].str());
  std::vector<Tensor> strided = {Tensor::ones({2, 3}, devs[0]).t(), Tensor::ones({2, 3}, devs[1]).t()};
  EXPECT_ERROR(comm::all_reduce_async(strided, markers_for(strided)),
               "comm::all_reduce_async: tensor 0 (strides [1, 3]) is not contiguous");
  std::vector<Tensor> shapes = {Tensor::ones({4}, devs[0]), Tensor::ones({5}, devs[1])};
  EXPECT_ERROR(comm::all_reduce_async(shapes, markers_for(shapes)),
               "comm::all_reduce_async: tensor 1 has shape [5] but expected [4]");
  std::vector<Tensor> same = {Tensor::ones({2}, devs[0]), Tensor::ones({2}, devs[0])};
  EXPECT_ERROR(comm::all_reduce_async(same, markers_for(same)),
               "comm::all_reduce_async: device " + devs[0].str() + " appears twice (tensors 0 and 1)");
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE_SET(CommAllReduceAsync);

}  // namespace
}  // namespace tandem
