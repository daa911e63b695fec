// The Trainer as one process of a group (every process of the job runs every test), on one and on two virtual CPU
// devices per process and on GPUs (group_devices.h): N processes with M devices each train exactly as one process on
// N * M virtual CPU devices, a resume from rank 0's checkpoint continues exactly, and only rank 0 runs the callbacks
// and writes files. Run alone (no launcher) the group has one process and the same expectations hold.

#include <unistd.h>

#include <cmath>
#include <filesystem>

#include "distributed/group_devices.h"
#include "support/test_support.h"

namespace tandem::trainers {
namespace {

using comm::ProcessGroup;
constexpr int64_t kEpochs = 6;
// 354 training rows in batches of 50: the last batch has 4 rows, so with 3 processes x 2 devices (chunks of 1 row)
// the last rank trains on none of them.
constexpr int64_t kBatch = 50;

using testing::diabetes;

std::vector<Device> cpu_devices(int64_t count) {
  std::vector<Device> devices;
  for (int64_t i = 0; i < count; ++i) devices.push_back(Device::cpu(static_cast<int>(i)));
  return devices;
}

TrainerOptions options_for(int64_t epochs) {
  TrainerOptions options;
  options.epochs = epochs;
  options.batch_size = kBatch;
  options.resume_may_change = {"epochs"};
  return options;
}

// The seed net trained on `devices` of this process alone, or (with a group) as one process of the group; on GPUs
// its steps are replayed from CUDA graphs unless `capture` is false.
Trainer seed_net_trainer(std::vector<Device> devices, std::shared_ptr<ProcessGroup> group, int64_t epochs,
                         bool capture = true) {
  manual_seed(0);
  TrainerOptions options = options_for(epochs);
  options.capture = capture;
  if (group) {
    options.group = std::move(group);
  } else {
    options.devices = std::move(devices);
  }
  return Trainer(make_mlp(10, 20), options);
}

void expect_same_parameters(const Trainer& actual, const Trainer& expected, double rtol, double atol) {
  const std::vector<Tensor> a = actual.model()->parameters();
  const std::vector<Tensor> b = expected.model()->parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) testing::expect_close(a[i], b[i], rtol, atol);
}

void expect_relatively_close(double actual, double expected, double rtol, const char* what) {
  EXPECT_LE(std::abs(actual - expected), rtol * std::abs(expected)) << what << ": " << actual << " vs " << expected;
}

// A path every process of the group names alike (rank 0's pid, broadcast), unique per job.
std::string shared_temp_path(ProcessGroup& group, const std::string& name) {
  std::vector<Tensor> pid;
  for (const Device& device : group.devices()) {
    pid.push_back(Tensor::from_vector({static_cast<float>(getpid())}, {1}, device));  // pids < 2^24: exact
  }
  group.broadcast(pid, 0);
  return ::testing::TempDir() + "tandem_distributed_trainer_" + std::to_string(static_cast<int64_t>(pid[0].item())) +
         "_" + name;
}

using DistributedTrainer = testing::OnGroupDevices;

TEST_P(DistributedTrainer, EqualsOneProcessOnEveryDeviceOfTheGroup) {
  Trainer distributed = seed_net_trainer({}, group_, kEpochs);
  const FitResult result = distributed.fit(diabetes().train, diabetes().test);
  Trainer single = seed_net_trainer(cpu_devices(static_cast<int64_t>(group_->world_devices())), nullptr, kEpochs);
  const FitResult expected = single.fit(diabetes().train, diabetes().test);

  ASSERT_TRUE(result.test.has_value());
  expect_relatively_close(result.test->mse, expected.test->mse, 1e-5, "test mse");
  expect_relatively_close(result.train.mse, expected.train.mse, 1e-5, "train mse");
  EXPECT_EQ(result.steps, expected.steps);
  expect_same_parameters(distributed, single, 1e-4, 1e-5);
  // On GPUs every process replays its steps (Note [Capturing across processes] in training_step.h).
  if (GetParam() == testing::GroupDevices::CUDA) EXPECT_GT(result.captured_steps, 0) << result.eager_reason;
}

TEST_P(DistributedTrainer, AccumulatedStepsEqualOneProcessOnTheLargerBatch) {
  // 354 training rows as one process's batches of 52 (6 of them and one of 42), in micro-batches of 26, two per step
  // (TrainerOptions::accumulate_steps; the last step 26 + 16 rows), and of 4, 13 per step (the last 10 x 4 + 2; with 3
  // processes x 2 devices some process has no rows in each micro-batch): each process accumulates its shards inside
  // no_sync().
  const auto trainer_for = [this](int64_t batch_size, int64_t accumulate_steps, bool grouped) {
    manual_seed(0);
    TrainerOptions options = options_for(3);
    options.batch_size = batch_size;
    options.accumulate_steps = accumulate_steps;
    if (grouped) {
      options.group = group_;
    } else {
      options.devices = cpu_devices(static_cast<int64_t>(group_->world_devices()));
    }
    return Trainer(make_mlp(10, 20), options);
  };
  Trainer single = trainer_for(52, 1, false);
  const FitResult expected = single.fit(diabetes().train, diabetes().test);
  EXPECT_EQ(expected.steps, 3 * 7);
  for (const std::pair<int64_t, int64_t> micro : {std::pair<int64_t, int64_t>{26, 2}, {4, 13}}) {
    SCOPED_TRACE("micro-batches of " + std::to_string(micro.first) + ", " + std::to_string(micro.second) + " per step");
    Trainer distributed = trainer_for(micro.first, micro.second, true);
    const FitResult result = distributed.fit(diabetes().train, diabetes().test);
    EXPECT_EQ(result.steps, expected.steps);
    ASSERT_TRUE(result.test.has_value());
    expect_relatively_close(result.test->mse, expected.test->mse, 1e-5, "test mse");
    expect_same_parameters(distributed, single, 1e-4, 1e-5);
  }
}

TEST_P(DistributedTrainer, EveryProcessReportsTheSameGlobalLossesAndMetrics) {
  struct Recorder : Callback {
    std::vector<double> losses;
    void on_epoch_end(const Trainer&, const EpochReport& report) override { losses.push_back(report.train_loss); }
  };
  Trainer distributed = seed_net_trainer({}, group_, 2);
  auto recorder = std::make_shared<Recorder>();
  distributed.add_callback(recorder);
  const FitResult result = distributed.fit(diabetes().train, diabetes().test);
  // Rank 0 broadcasts its final test MSE; every process computed the same.
  std::vector<Tensor> mse;
  for (const Device& device : group_->devices()) {
    mse.push_back(Tensor::from_vector({static_cast<float>(result.test->mse)}, {1}, device));
  }
  group_->broadcast(mse, 0);
  EXPECT_EQ(mse[0].item(), static_cast<float>(result.test->mse));
  // Rank 0's callbacks see the global epoch losses, those of one process on every device.
  Trainer single = seed_net_trainer(cpu_devices(static_cast<int64_t>(group_->world_devices())), nullptr, 2);
  auto expected = std::make_shared<Recorder>();
  single.add_callback(expected);
  single.fit(diabetes().train, diabetes().test);
  if (group_->rank() == 0) {
    ASSERT_EQ(recorder->losses.size(), 2u);
    for (size_t e = 0; e < 2; ++e) expect_relatively_close(recorder->losses[e], expected->losses[e], 1e-5, "loss");
  } else {
    EXPECT_TRUE(recorder->losses.empty());  // callbacks run on rank 0 only
  }
}

// Eager steps: a resumed fit takes the capture's eager warm-up steps again where the uninterrupted one replays, and
// captured steps equal eager ones to float rounding, not bit for bit.
TEST_P(DistributedTrainer, ResumingFromRankZerosCheckpointContinuesExactly) {
  const std::string path = shared_temp_path(*group_, "resume_" + testing::name_of(GetParam()) + ".safetensors");
  Trainer uninterrupted = seed_net_trainer({}, group_, kEpochs, /*capture=*/false);
  uninterrupted.fit(diabetes().train, diabetes().test);

  {
    Trainer first = seed_net_trainer({}, group_, 2, /*capture=*/false);
    first.add_callback(std::make_shared<CheckpointSaver>(path));
    first.fit(diabetes().train, diabetes().test);
  }
  group_->barrier();  // rank 0 has written the checkpoint
  Trainer resumed = seed_net_trainer({}, group_, kEpochs, /*capture=*/false);
  resumed.load_checkpoint(path);  // every rank reads it
  EXPECT_EQ(resumed.epoch(), 2);
  resumed.fit(diabetes().train, diabetes().test);
  expect_same_parameters(resumed, uninterrupted, 0.0, 0.0);  // bit for bit
  group_->barrier();
  if (group_->rank() == 0) std::filesystem::remove(path);
}

TEST_P(DistributedTrainer, OnlyRankZeroWritesFiles) {
  // Each rank names its own files: only rank 0's may exist afterwards.
  const std::string mine = testing::scratch_path(testing::name_of(GetParam()));
  Trainer trainer = seed_net_trainer({}, group_, 1);
  trainer.add_callback(std::make_shared<MetricsLogger>(mine + ".metrics"));
  trainer.add_callback(std::make_shared<CheckpointSaver>(mine + ".callback.safetensors"));
  trainer.fit(diabetes().train);
  trainer.save_checkpoint(mine + ".direct.safetensors");
  const bool primary = group_->rank() == 0;
  for (const char* suffix : {".metrics", ".callback.safetensors", ".direct.safetensors"}) {
    EXPECT_EQ(std::filesystem::exists(mine + suffix), primary) << suffix << " on rank " << group_->rank();
    std::filesystem::remove(mine + suffix);
  }
}

TEST_P(DistributedTrainer, DevicesMustBeTheGroups) {
  TrainerOptions options = options_for(1);
  options.group = group_;
  options.devices = {Device::cpu(5)};
  EXPECT_ERROR(Trainer(make_mlp(10, 20), options),
               "Trainer: devices [cpu:5] but the group's are " + to_string(group_->devices()));
  options.devices = group_->devices();  // the same list is fine
  EXPECT_NO_THROW(Trainer(make_mlp(10, 20), options));
}

// Note [Setups compared across processes]: the last rank runs another setup; every rank refuses at the start of
// fit with the same message, naming the first difference, before anything trains.
TEST_P(DistributedTrainer, ProcessesOfDifferentSetupsRefuseToTrainTogether) {
  if (group_->size() == 1) GTEST_SKIP() << "needs two or more processes";
  const int last = group_->size() - 1;
  const bool odd_one = group_->rank() == last;
  const std::string on_last = " on rank " + std::to_string(last);
  {
    TrainerOptions options = options_for(2);
    options.group = group_;
    options.sgd.lr = odd_one ? 0.02 : 0.01;
    manual_seed(0);
    Trainer trainer(make_mlp(10, 20), options);
    EXPECT_ERROR(trainer.fit(diabetes().train, diabetes().test),
                 "Trainer::fit: the processes' setups differ: lr is 0.01 on rank 0 but 0.02" + on_last +
                     " (1 fact differs); every process must run the same setup");
    EXPECT_EQ(trainer.step(), 0);
  }
  {  // the same shape of data, other values
    TableDataset train = diabetes().train;
    if (odd_one) train.targets[7] += 1.0;
    Trainer trainer = seed_net_trainer({}, group_, 2);
    EXPECT_ERROR(trainer.fit(train, diabetes().test), "the processes' setups differ: train_data is ");
  }
  {  // the same setup but another starting state (as after resuming from another checkpoint)
    Trainer trainer = seed_net_trainer({}, group_, 2);
    if (odd_one) {
      NoGradGuard no_grad;
      trainer.model()->parameters()[0].fill_(0.5);
    }
    EXPECT_ERROR(trainer.fit(diabetes().train, diabetes().test), "the processes' setups differ: state is ");
  }
  // The group is still in step: every rank made the same exchanges.
  Trainer trainer = seed_net_trainer({}, group_, 1);
  EXPECT_EQ(trainer.fit(diabetes().train, diabetes().test).epochs, 1);
}

TANDEM_INSTANTIATE_ON_GROUP_DEVICES(DevicesPerProcess, DistributedTrainer);

}  // namespace
}  // namespace tandem::trainers
