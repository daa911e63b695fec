// A ProcessGroup of one process: exactly the single-process comm functions, on every device set; and the errors of
// group creation.

#include <chrono>

#include "comm/comm_test_helpers.h"

namespace tandem {
namespace {

using comm::ProcessGroup;
using comm::ReduceOp;
using testing::expect_equal;
using testing::expect_values;
using testing::float64_sum;

class SingleProcessGroup : public testing::EveryDeviceSet {
 protected:
  std::vector<Tensor> random_tensors(const Shape& shape) const {
    std::vector<Tensor> tensors;
    for (const Device& d : devices()) tensors.push_back(Tensor::randn(shape, d));
    return tensors;
  }
};

TEST_P(SingleProcessGroup, IsOneProcessDrivingTheGivenDevices) {
  auto group = ProcessGroup::single(devices());
  EXPECT_EQ(group->rank(), 0);
  EXPECT_EQ(group->size(), 1);
  EXPECT_EQ(group->local_rank(), 0);
  EXPECT_EQ(group->local_size(), 1);
  EXPECT_EQ(group->launch().channel, comm::LaunchInfo::Channel::None);
  EXPECT_EQ(group->devices(), devices());
  EXPECT_EQ(group->world_devices(), devices().size());
  EXPECT_EQ(group->options().timeout, std::chrono::minutes(10));
}

TEST_P(SingleProcessGroup, AllReduceIsCommsAllReduceForSumAndAverage) {
  auto group = ProcessGroup::single(devices());
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Average}) {  // the average over one process is the sum
    std::vector<Tensor> tensors = random_tensors({4, 3});
    std::vector<Tensor> reference;
    for (const Tensor& t : tensors) reference.push_back(t.clone());
    group->all_reduce(tensors, op);
    comm::all_reduce(reference);
    for (size_t i = 0; i < tensors.size(); ++i) expect_equal(tensors[i], reference[i]);
  }
}

TEST_P(SingleProcessGroup, AllReduceAsyncHoldsTheSumOnceJoined) {
  auto group = ProcessGroup::single(devices());
  std::vector<Tensor> tensors = random_tensors({6});
  const std::vector<double> expected = float64_sum(tensors);
  std::vector<StreamMarker> ready;
  for (const Tensor& t : tensors) ready.push_back(StreamMarker::record(t.device()));
  comm::GroupWork work = group->all_reduce_async(tensors, ready, ReduceOp::Average);
  work.wait();
  for (const Tensor& t : tensors) expect_values(t, expected, {6});
}

TEST_P(SingleProcessGroup, BroadcastAllGatherAndReduceScatterMatchComm) {
  auto group = ProcessGroup::single(devices());
  const size_t n = devices().size();
  std::vector<Tensor> tensors = random_tensors({2, 3});
  const Tensor first = tensors[0].clone();
  group->broadcast(tensors, 0);
  for (const Tensor& t : tensors) expect_equal(t, first);

  const std::vector<Tensor> inputs = random_tensors({2, 3});
  const Tensor gathered = comm::gather(inputs, 0, devices()[0]);
  const std::vector<Tensor> all = group->all_gather(inputs);
  ASSERT_EQ(all.size(), n);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(all[i].device(), devices()[i]);
    expect_equal(all[i], gathered);
  }

  const std::vector<Tensor> rows = random_tensors({static_cast<int64_t>(2 * n), 3});
  const Tensor sum = comm::reduce_add(rows, devices()[0]);
  const std::vector<Tensor> chunks = group->reduce_scatter(rows);
  for (size_t i = 0; i < n; ++i) {
    EXPECT_EQ(chunks[i].device(), devices()[i]);
    EXPECT_EQ(chunks[i].shape(), Shape({2, 3}));
    testing::expect_close(chunks[i], sum.narrow(0, static_cast<int64_t>(2 * i), 2));
  }
  std::vector<Tensor> in_place = rows;
  for (Tensor& t : in_place) t = t.clone();
  const std::vector<Tensor> views = group->reduce_scatter_in_place(in_place);
  for (size_t i = 0; i < n; ++i) {
    const Tensor own = in_place[i].narrow(0, static_cast<int64_t>(2 * i), 2);
    EXPECT_EQ(views[i].data_ptr(), own.data_ptr());
    testing::expect_close(own, sum.narrow(0, static_cast<int64_t>(2 * i), 2));
  }
  group->barrier();
}

TEST_P(SingleProcessGroup, CollectivesRecordNoAutogradHistory) {
  auto group = ProcessGroup::single(devices());
  std::vector<Tensor> tensors;
  for (const Device& d : devices()) tensors.push_back(Tensor::ones({3}, d).set_requires_grad());
  const std::vector<Tensor> gathered = group->all_gather(tensors);
  for (const Tensor& t : gathered) EXPECT_EQ(t.grad_fn(), nullptr);
}

// Not the Mixed set: a group's devices are of one type.
INSTANTIATE_TEST_SUITE_P(Sets, SingleProcessGroup,
                         ::testing::Values(testing::DeviceSet::CPU2, testing::DeviceSet::CPU3,
                                           testing::DeviceSet::MultiCUDA),
                         testing::device_set_name);

class SingleProcessGroupErrors : public ::testing::Test {};

TEST_F(SingleProcessGroupErrors, DeviceListsAndOptionsAreChecked) {
  EXPECT_ERROR(ProcessGroup::single({}), "ProcessGroup::single: got no devices but expected this process's devices");
  EXPECT_ERROR(ProcessGroup::single({Device::cpu(0), Device::cpu(1), Device::cpu(0)}),
               "ProcessGroup::single: device cpu:0 appears twice");
  EXPECT_ERROR(ProcessGroup::single({testing::missing_gpu()}), "ProcessGroup::single: device cuda:7 does not exist");
  EXPECT_ERROR(ProcessGroup::single({Device::cpu(0)}, {.timeout = std::chrono::milliseconds(0)}),
               "ProcessGroup::single: options.timeout is 0 ms but expected a positive duration");
  if (cuda_device_count() > 0) {
    EXPECT_ERROR(ProcessGroup::single({Device::cpu(0), Device::cuda(0)}), "mix CPU and CUDA devices");
  }
}

TEST_F(SingleProcessGroupErrors, OneGroupLivesAtATime) {
  auto group = ProcessGroup::single({Device::cpu(0)});
  EXPECT_ERROR(ProcessGroup::single({Device::cpu(1)}),
               "ProcessGroup: a group is alive in this process already but expected at most one");
  group.reset();
  EXPECT_EQ(ProcessGroup::single({Device::cpu(1)})->devices(), std::vector<Device>{Device::cpu(1)});
}

TEST_F(SingleProcessGroupErrors, TensorsAreCheckedAgainstTheGroupsDevices) {
  auto group = ProcessGroup::single({Device::cpu(0), Device::cpu(1)});
  std::vector<Tensor> swapped = {Tensor::ones({2}, Device::cpu(1)), Tensor::ones({2}, Device::cpu(0))};
  EXPECT_ERROR(group->all_reduce(swapped),
               "ProcessGroup::all_reduce: tensor 0 is on cpu:1 but expected cpu:0 (devices()[0])");
  std::vector<Tensor> shapes = {Tensor::ones({2}, Device::cpu(0)), Tensor::ones({3}, Device::cpu(1))};
  EXPECT_ERROR(group->all_reduce(shapes), "ProcessGroup::all_reduce: tensor 1 has shape [3] but expected [2]");
  std::vector<Tensor> undefined = {Tensor::ones({2}, Device::cpu(0)), Tensor()};
  EXPECT_ERROR(group->broadcast(undefined, 0), "ProcessGroup::broadcast: tensor 1 is undefined");
  std::vector<Tensor> scalars = {Tensor::scalar(1, Device::cpu(0)), Tensor::scalar(2, Device::cpu(1))};
  EXPECT_ERROR(group->all_gather(scalars), "ProcessGroup::all_gather: the tensors are 0-dim");
  EXPECT_ERROR(group->reduce_scatter(scalars), "ProcessGroup::reduce_scatter: the tensors are 0-dim");
  std::vector<Tensor> good = {Tensor::ones({2}, Device::cpu(0)), Tensor::ones({2}, Device::cpu(1))};
  std::vector<StreamMarker> misplaced = {StreamMarker::record(Device::cpu(1)), StreamMarker::record(Device::cpu(0))};
  EXPECT_ERROR(group->all_reduce_async(good, misplaced),
               "ProcessGroup::all_reduce_async: marker 0 is on cpu:1 but tensor 0 is on cpu:0");
  EXPECT_ERROR(group->broadcast(good, -1), "ProcessGroup::broadcast: root is -1 but expected a rank in [0, 1)");
}

}  // namespace
}  // namespace tandem
