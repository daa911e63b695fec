// ProcessGroup collectives on GPUs, checked against values computed on the host: under an MPI launcher with one GPU
// per process (cuda:<local rank>; one NCCL communicator across the processes), and in one process driving cuda:0 and
// cuda:1 (a group of one process). Each test skips when the GPUs are missing, so on a machine without them every
// process skips alike.
//   mpirun -np 2 <tests binary> --gtest_filter='NcclGroup*'   # one GPU per process
//   <tests binary> --gtest_filter='NcclGroup*'                 # one process, two GPUs

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "support/test_support.h"
#include "tandem/comm/process_group.h"

namespace tandem::testing {
namespace {

class NcclGroup : public ::testing::Test {
 protected:
  void SetUp() override {
    comm::ProcessGroupOptions options;
    options.timeout = std::chrono::seconds(60);
    const comm::LaunchInfo launch = comm::LaunchInfo::from_environment();
    if (launch.channel != comm::LaunchInfo::Channel::None) {
      TANDEM_REQUIRE_GPUS(launch.local_size);
      group_ = comm::ProcessGroup::from_environment({Device::cuda(launch.local_rank)}, options);
    } else {
      TANDEM_REQUIRE_GPUS(2);
      group_ = comm::ProcessGroup::single({Device::cuda(0), Device::cuda(1)}, options);
    }
  }

  size_t local() const { return group_->devices().size(); }
  int world() const { return static_cast<int>(group_->world_devices()); }
  // The global rank of local device i (process 0's devices first).
  int global(size_t i) const { return group_->rank() * static_cast<int>(local()) + static_cast<int>(i); }

  // One tensor per local device: element j of global device g's is value(g, j).
  template <typename Value>
  std::vector<Tensor> per_device(const Shape& shape, Value value) const {
    std::vector<Tensor> tensors;
    for (size_t i = 0; i < local(); ++i) {
      std::vector<float> values(static_cast<size_t>(numel_of(shape)));
      for (size_t j = 0; j < values.size(); ++j) values[j] = value(global(i), static_cast<int>(j));
      tensors.push_back(Tensor::from_vector(values, shape, group_->devices()[i]));
    }
    return tensors;
  }

  std::shared_ptr<comm::ProcessGroup> group_;
};

// Small integers: every sum below is exact in float32.
float sample(int g, int j) { return static_cast<float>(j + 100 * g); }

// sum over g < world of sample(g, j), divided by `divisor`.
std::vector<double> expected_sum(int world, size_t count, double divisor = 1.0) {
  std::vector<double> sums(count, 0.0);
  for (int g = 0; g < world; ++g) {
    for (size_t j = 0; j < count; ++j) sums[j] += sample(g, static_cast<int>(j));
  }
  for (double& sum : sums) sum /= divisor;
  return sums;
}

TEST_F(NcclGroup, AllReduceSumCUDA) {
  std::vector<Tensor> tensors = per_device({3, 5}, sample);
  group_->all_reduce(tensors, comm::ReduceOp::Sum);
  for (const Tensor& t : tensors) expect_values(t, expected_sum(world(), 15), {3, 5}, 0.0, 0.0);
}

// Average divides by the number of processes, not by the number of GPUs.
TEST_F(NcclGroup, AllReduceAverageDividesByProcessesCUDA) {
  std::vector<Tensor> tensors = per_device({3, 5}, sample);
  group_->all_reduce(tensors, comm::ReduceOp::Average);
  for (const Tensor& t : tensors) expect_values(t, expected_sum(world(), 15, group_->size()), {3, 5});
}

// The collective reads what a long run of kernels on the compute stream produced, and the consumers issued right
// after it read the sums (Note [Comm stream ordering]).
TEST_F(NcclGroup, AllReduceOrderedAfterSlowProducerAndBeforeConsumersCUDA) {
  const int64_t n = int64_t{1} << 22;
  std::vector<Tensor> tensors;
  for (const Device& device : group_->devices()) {
    Tensor t = Tensor::zeros({n}, device);
    for (int step = 0; step < 20; ++step) t = t + Tensor::ones({n}, device);
    tensors.push_back(t);
  }
  group_->all_reduce(tensors, comm::ReduceOp::Sum);
  for (const Tensor& t : tensors) {
    const Tensor doubled = t + t;
    const std::vector<double> values = to_double(doubled);
    EXPECT_EQ(values.front(), 40.0 * world());
    EXPECT_EQ(values.back(), 40.0 * world());
  }
}

TEST_F(NcclGroup, AllReduceAsyncJoinedByWaitCUDA) {
  std::vector<Tensor> tensors = per_device({4, 4}, sample);
  std::vector<StreamMarker> ready;
  for (const Device& device : group_->devices()) ready.push_back(StreamMarker::record(device));
  comm::GroupWork work = group_->all_reduce_async(tensors, ready, comm::ReduceOp::Average);
  work.wait();
  for (const Tensor& t : tensors) expect_values(t, expected_sum(world(), 16, group_->size()), {4, 4});
}

// Note [Collectives inside a graph capture]: collectives issued while the group's streams are captured run nothing at
// the capture and run at every replay, in their order (a synchronous all_reduce on the compute streams, then a
// started one on the communication streams), among eager collectives before and after the replays; each replay is
// handed to the watchdog.
TEST_F(NcclGroup, CollectivesCapturedInAGraphRunAtEveryReplayCUDA) {
  std::vector<Tensor> tensors = per_device({3, 5}, sample);
  group_->all_reduce(tensors, comm::ReduceOp::Sum);  // eager: every tensor holds the sum
  const std::vector<double> sum = expected_sum(world(), 15);
  DeviceGraph graph;
  graph.begin_capture(group_->devices());
  group_->all_reduce(tensors, comm::ReduceOp::Sum);
  std::vector<StreamMarker> ready;
  for (const Device& device : group_->devices()) ready.push_back(StreamMarker::record(device));
  comm::GroupWork work = group_->all_reduce_async(tensors, ready, comm::ReduceOp::Average);
  work.wait();
  graph.end_capture();
  for (const Tensor& t : tensors) expect_values(t, sum, {3, 5}, 0.0, 0.0);  // nothing ran
  // Equal tensors everywhere: the Sum multiplies them by world(), the Average by world() / size().
  const double per_replay = static_cast<double>(world()) * world() / group_->size();
  double factor = 1.0;
  for (int replay = 0; replay < 3; ++replay) {
    graph.replay();
    group_->watch_replay("captured test step");
    factor *= per_replay;
  }
  group_->all_reduce(tensors, comm::ReduceOp::Sum);  // eager again, after the replays
  factor *= world();
  std::vector<double> expected;
  for (double value : sum) expected.push_back(value * factor);
  for (const Tensor& t : tensors) expect_values(t, expected, {3, 5}, 0.0, 0.0);
}

// From the last process, whose first device is global rank (size - 1) * local devices.
TEST_F(NcclGroup, BroadcastFromLastProcessCUDA) {
  const int root = group_->size() - 1;
  std::vector<Tensor> tensors = per_device({2, 3}, sample);
  group_->broadcast(tensors, root);
  std::vector<double> expected;
  for (int j = 0; j < 6; ++j) expected.push_back(sample(root * static_cast<int>(local()), j));
  for (const Tensor& t : tensors) expect_values(t, expected, {2, 3}, 0.0, 0.0);
}

TEST_F(NcclGroup, AllGatherInGlobalDeviceOrderCUDA) {
  const std::vector<Tensor> inputs = per_device({2, 3}, sample);
  const std::vector<Tensor> outputs = group_->all_gather(inputs);
  ASSERT_EQ(outputs.size(), local());
  std::vector<double> expected;
  for (int g = 0; g < world(); ++g) {
    for (int j = 0; j < 6; ++j) expected.push_back(sample(g, j));
  }
  for (size_t i = 0; i < local(); ++i) {
    EXPECT_EQ(outputs[i].device(), group_->devices()[i]);
    expect_values(outputs[i], expected, {2 * world(), 3}, 0.0, 0.0);
  }
}

// Device g receives the reduction of chunk g (rows 2g and 2g + 1) over every device, divided by the processes.
TEST_F(NcclGroup, ReduceScatterAverageGivesEachDeviceItsChunkCUDA) {
  const int rows = 2 * world();
  const std::vector<Tensor> inputs = per_device({rows, 3}, sample);
  const std::vector<Tensor> outputs = group_->reduce_scatter(inputs, comm::ReduceOp::Average);
  ASSERT_EQ(outputs.size(), local());
  const std::vector<double> sums = expected_sum(world(), static_cast<size_t>(rows * 3), group_->size());
  for (size_t i = 0; i < local(); ++i) {
    const auto chunk = sums.begin() + global(i) * 6;
    EXPECT_EQ(outputs[i].device(), group_->devices()[i]);
    expect_values(outputs[i], std::vector<double>(chunk, chunk + 6), {2, 3});
  }
}

}  // namespace
}  // namespace tandem::testing
