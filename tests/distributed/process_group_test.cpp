// ProcessGroup collectives across the processes of an mpirun job (every process runs every test), on one and on two
// virtual CPU devices per process, against closed forms. Run alone (no launcher) the group has one process and the
// same expectations hold.

#include <chrono>
#include <thread>

#include "support/test_support.h"

namespace tandem {
namespace {

using comm::ProcessGroup;
using comm::ReduceOp;
using testing::expect_values;

// A generous timeout: a test that leaves a collective unmatched ends the job instead of hanging ctest.
constexpr comm::ProcessGroupOptions kOptions{.timeout = std::chrono::seconds(60)};

std::vector<Device> cpu_devices(int count) {
  std::vector<Device> devices;
  for (int i = 0; i < count; ++i) devices.push_back(Device::cpu(i));
  return devices;
}

// Parameter: the number of virtual CPU devices each process drives.
class DistributedGroup : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override { group_ = ProcessGroup::from_environment(cpu_devices(GetParam()), kOptions); }
  void TearDown() override { group_.reset(); }

  int local() const { return GetParam(); }
  int world() const { return static_cast<int>(group_->world_devices()); }
  // The global rank of local device i (process 0's devices first).
  int global(int i) const { return group_->rank() * local() + i; }

  // One tensor per local device; element k of device g's tensor is value(g, k).
  template <typename Value>
  std::vector<Tensor> per_device(const Shape& shape, Value value) const {
    std::vector<Tensor> tensors;
    for (int i = 0; i < local(); ++i) {
      std::vector<float> values(static_cast<size_t>(numel_of(shape)));
      for (size_t k = 0; k < values.size(); ++k) values[k] = value(global(i), static_cast<int>(k));
      tensors.push_back(Tensor::from_vector(values, shape, group_->devices()[static_cast<size_t>(i)]));
    }
    return tensors;
  }

  std::shared_ptr<ProcessGroup> group_;
};

// (k + 1) * (g + 1) summed over every device g of the job.
std::vector<double> sum_of_ramps(int world, int64_t count, double divisor = 1.0) {
  std::vector<double> expected;
  for (int64_t k = 0; k < count; ++k)
    expected.push_back(static_cast<double>(k + 1) * world * (world + 1) / 2 / divisor);
  return expected;
}

float ramp(int g, int k) { return static_cast<float>((k + 1) * (g + 1)); }

TEST_P(DistributedGroup, KnowsItsPlaceInTheJob) {
  const comm::LaunchInfo info = comm::LaunchInfo::from_environment();
  EXPECT_EQ(group_->rank(), info.rank);
  EXPECT_EQ(group_->size(), info.size);
  EXPECT_LT(group_->local_rank(), group_->local_size());
  EXPECT_EQ(group_->devices(), cpu_devices(local()));
  EXPECT_EQ(group_->world_devices(), static_cast<size_t>(group_->size() * local()));
}

TEST_P(DistributedGroup, AllReduceSumsEveryDeviceOfEveryProcess) {
  std::vector<Tensor> tensors = per_device({3, 4}, ramp);
  const std::vector<Tensor> handles = tensors;
  group_->all_reduce(tensors, ReduceOp::Sum);
  for (int i = 0; i < local(); ++i) {
    EXPECT_TRUE(tensors[i].is_same(handles[i]));  // in place
    expect_values(tensors[i], sum_of_ramps(world(), 12), {3, 4}, 0.0, 0.0);
  }
}

TEST_P(DistributedGroup, AllReduceAverageDividesByTheNumberOfProcesses) {
  std::vector<Tensor> tensors = per_device({5}, ramp);
  group_->all_reduce(tensors, ReduceOp::Average);
  for (const Tensor& t : tensors) expect_values(t, sum_of_ramps(world(), 5, group_->size()), {5});
}

TEST_P(DistributedGroup, AllReduceAsyncCompletesOnCpuDevices) {
  std::vector<Tensor> tensors = per_device({2, 3}, ramp);
  std::vector<StreamMarker> ready;
  for (const Tensor& t : tensors) ready.push_back(StreamMarker::record(t.device()));
  comm::GroupWork work = group_->all_reduce_async(tensors, ready, ReduceOp::Sum);
  EXPECT_FALSE(work.pending());
  for (const Tensor& t : tensors) expect_values(t, sum_of_ramps(world(), 6), {2, 3}, 0.0, 0.0);
}

TEST_P(DistributedGroup, BroadcastGivesEveryDeviceTheRootsFirstTensor) {
  for (int root = 0; root < group_->size(); ++root) {
    std::vector<Tensor> tensors = per_device({2, 2}, [](int g, int k) { return static_cast<float>(100 * g + k); });
    group_->broadcast(tensors, root);
    const double first = 100.0 * root * local();  // the root's first device
    for (const Tensor& t : tensors) expect_values(t, {first, first + 1, first + 2, first + 3}, {2, 2}, 0.0, 0.0);
  }
}

TEST_P(DistributedGroup, AllGatherConcatenatesInGlobalDeviceOrder) {
  const std::vector<Tensor> inputs = per_device({2, 3}, [](int g, int k) { return static_cast<float>(1000 * g + k); });
  const std::vector<Tensor> outputs = group_->all_gather(inputs);
  ASSERT_EQ(outputs.size(), static_cast<size_t>(local()));
  std::vector<double> expected;
  for (int g = 0; g < world(); ++g) {
    for (int k = 0; k < 6; ++k) expected.push_back(1000.0 * g + k);
  }
  for (int i = 0; i < local(); ++i) {
    EXPECT_EQ(outputs[i].device(), group_->devices()[i]);
    expect_values(outputs[i], expected, {2 * world(), 3}, 0.0, 0.0);
  }
}

TEST_P(DistributedGroup, ReduceScatterLeavesEachDeviceItsChunkOfTheSum) {
  const int64_t rows = 2, cols = 3;
  const std::vector<Tensor> inputs = per_device({rows * world(), cols}, ramp);
  const std::vector<Tensor> before = per_device({rows * world(), cols}, ramp);
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Average}) {
    const std::vector<Tensor> outputs = group_->reduce_scatter(inputs, op);
    const double divisor = op == ReduceOp::Sum ? 1.0 : group_->size();
    const std::vector<double> all = sum_of_ramps(world(), rows * world() * cols, divisor);
    for (int i = 0; i < local(); ++i) {
      const auto first = all.begin() + global(i) * rows * cols;
      expect_values(outputs[i], std::vector<double>(first, first + rows * cols), {rows, cols});
      testing::expect_close(inputs[i], before[i], 0.0, 0.0);  // the inputs are left alone
    }
  }
}

// In place, each device's chunk of its own tensor holds what reduce_scatter returns, and is returned as a view of it.
TEST_P(DistributedGroup, ReduceScatterInPlaceLeavesTheChunkInTheTensor) {
  const int64_t rows = 2, cols = 3;
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Average}) {
    std::vector<Tensor> tensors = per_device({rows * world(), cols}, ramp);
    const std::vector<Tensor> chunks = group_->reduce_scatter_in_place(tensors, op);
    const double divisor = op == ReduceOp::Sum ? 1.0 : group_->size();
    const std::vector<double> all = sum_of_ramps(world(), rows * world() * cols, divisor);
    ASSERT_EQ(chunks.size(), tensors.size());
    for (int i = 0; i < local(); ++i) {
      const auto first = all.begin() + global(i) * rows * cols;
      expect_values(chunks[i], std::vector<double>(first, first + rows * cols), {rows, cols});
      expect_values(tensors[i].narrow(0, global(i) * rows, rows), std::vector<double>(first, first + rows * cols),
                    {rows, cols});
      EXPECT_EQ(chunks[i].data_ptr(), tensors[i].narrow(0, global(i) * rows, rows).data_ptr());
    }
  }
}

TEST_P(DistributedGroup, ZeroElementTensorsNeedNoCommunication) {
  std::vector<Tensor> tensors = per_device({0, 3}, ramp);
  group_->all_reduce(tensors);
  group_->broadcast(tensors, group_->size() - 1);
  EXPECT_EQ(group_->all_gather(tensors)[0].shape(), Shape({0, 3}));
  EXPECT_EQ(group_->reduce_scatter(tensors)[0].shape(), Shape({0, 3}));
  EXPECT_EQ(group_->reduce_scatter_in_place(tensors)[0].shape(), Shape({0, 3}));
}

// Rank 0 reaches the barrier 300 ms after the others: they must wait for it there.
TEST_P(DistributedGroup, BarrierWaitsForTheLastProcess) {
  group_->barrier();
  const auto start = std::chrono::steady_clock::now();
  if (group_->rank() == 0) std::this_thread::sleep_for(std::chrono::milliseconds(300));
  group_->barrier();
  const auto waited = std::chrono::steady_clock::now() - start;
  if (group_->size() > 1) EXPECT_GE(waited, std::chrono::milliseconds(250));
}

// Every process's value in rank order, with all 64 bits (a digest may use the top ones).
TEST_P(DistributedGroup, ExchangeGivesEveryProcessEachProcesssValueInRankOrder) {
  const auto value_of = [](int rank) { return (uint64_t{1} << 63) | (uint64_t{0x1234} * static_cast<uint64_t>(rank)); };
  const std::vector<uint64_t> values = group_->exchange(value_of(group_->rank()), "the test's exchange");
  ASSERT_EQ(values.size(), static_cast<size_t>(group_->size()));
  for (int rank = 0; rank < group_->size(); ++rank) EXPECT_EQ(values[static_cast<size_t>(rank)], value_of(rank));
}

// A group on CPU devices has no device work to hand to its watchdog: the call is accepted and changes nothing.
TEST_P(DistributedGroup, WatchReplayOnCpuDevicesLeavesTheCollectivesAsTheyWere) {
  group_->watch_replay("captured test step");
  std::vector<Tensor> tensors = per_device({4}, ramp);
  group_->all_reduce(tensors, ReduceOp::Sum);
  for (const Tensor& t : tensors) expect_values(t, sum_of_ramps(world(), 4), {4});
}

TEST_P(DistributedGroup, ArgumentsAreCheckedBeforeAnythingIsSent) {
  std::vector<Tensor> good = per_device({4, 2}, ramp);
  std::vector<Tensor> too_few(good.begin(), good.end() - 1);
  EXPECT_ERROR(group_->all_reduce(too_few), "ProcessGroup::all_reduce: got " + std::to_string(local() - 1) +
                                                " tensors but expected one per device of this process");
  std::vector<Tensor> wrong_device = good;
  wrong_device[0] = Tensor::zeros({4, 2}, Device::cpu(5));
  EXPECT_ERROR(group_->broadcast(wrong_device, 0), "ProcessGroup::broadcast: tensor 0 is on cpu:5 but expected cpu:0");
  std::vector<Tensor> transposed = per_device({2, 4}, ramp);
  for (Tensor& t : transposed) t = t.t();
  EXPECT_ERROR(group_->all_gather(transposed),
               "ProcessGroup::all_gather: tensor 0 (shape [4, 2], strides [1, 4]) "
               "is not contiguous");
  EXPECT_ERROR(group_->broadcast(good, group_->size()),
               "ProcessGroup::broadcast: root is " + std::to_string(group_->size()) + " but expected a rank");
  if (world() > 1) {  // every size divides by one device
    std::vector<Tensor> odd_rows = per_device({2 * world() + 1, 2}, ramp);
    EXPECT_ERROR(group_->reduce_scatter(odd_rows),
                 "ProcessGroup::reduce_scatter: dim 0 has size " + std::to_string(2 * world() + 1) +
                     " but expected a multiple of world_devices() = " + std::to_string(world()));
    EXPECT_ERROR(group_->reduce_scatter_in_place(odd_rows),
                 "ProcessGroup::reduce_scatter_in_place: dim 0 has size " + std::to_string(2 * world() + 1));
  }
  std::vector<StreamMarker> one_marker = {StreamMarker::record(Device::cpu(0))};
  one_marker.resize(good.size() + 1);
  EXPECT_ERROR(group_->all_reduce_async(good, one_marker), "ProcessGroup::all_reduce_async: got " +
                                                               std::to_string(good.size() + 1) + " markers for " +
                                                               std::to_string(good.size()) + " tensors");
  EXPECT_ERROR(ProcessGroup::from_environment(cpu_devices(local()), kOptions), "a group is alive in this process");
  // Nothing was sent: the group still works.
  group_->all_reduce(good);
  for (const Tensor& t : good) expect_values(t, sum_of_ramps(world(), 8), {4, 2}, 0.0, 0.0);
}

INSTANTIATE_TEST_SUITE_P(DevicesPerProcess, DistributedGroup, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int>& info) { return "CPU" + std::to_string(info.param); });

// Rank 1 drives two devices, every other rank one: every rank refuses the group with the same message.
TEST(DistributedGroupCreation, MismatchedDeviceCountsAreAnErrorOnEveryRank) {
  const comm::LaunchInfo info = comm::LaunchInfo::from_environment();
  if (info.size < 2) GTEST_SKIP() << "needs a job of 2 or more processes (run under mpirun -np 2)";
  EXPECT_ERROR(ProcessGroup::from_environment(cpu_devices(info.rank == 1 ? 2 : 1), kOptions),
               "ProcessGroup::from_environment: rank 0 drives 1 CPU device(s) but rank 1 drives 2 CPU device(s)");
  // The failed group is gone, so a new one can be made, and it works.
  auto group = ProcessGroup::from_environment({Device::cpu(0)}, kOptions);
  std::vector<Tensor> ones = {Tensor::ones({3}, Device::cpu(0))};
  group->all_reduce(ones);
  expect_values(ones[0], std::vector<double>(3, info.size), {3}, 0.0, 0.0);
}

}  // namespace
}  // namespace tandem
