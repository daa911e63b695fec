// parallel::TrainingStep fed a batch already cut over the devices (TrainingBatch::inputs and labels, as a
// DataLoader with devices delivers it): the same step as the whole batch's cut the same way
// (TrainingBatch::device_rows), for torch.chunk's cut and any other; shards of a global batch weighted by its rows; the
// checks of the chunks; and graphs that survive an evaluation in eval mode between steps.

#include <cmath>
#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "parallel/parallel_test_helpers.h"
#include "support/one_and_two_gpus.h"
#include "tandem/comm/comm.h"
#include "tandem/nn/training_mode_guard.h"
#include "tandem/parallel/training_step.h"

namespace tandem::testing {
namespace {

// A net (make_net: 4 inputs, 2 outputs) replicated over `devices`, with SGD and momentum over the replicas, and a
// TrainingStep with `options` over both.
struct Replicas {
  explicit Replicas(const std::vector<Device>& devices, parallel::TrainingStepOptions options = {})
      : net(make_net(devices[0])),
        model(std::make_unique<parallel::ReplicatedModule>(net, devices)),
        optimizer(std::make_unique<parallel::ReplicatedSGD>(*model, optim::SGDOptions{.lr = 0.05, .momentum = 0.9})),
        step(std::make_unique<parallel::TrainingStep>(*model, *optimizer, nn::mse_loss, options)) {}
  std::shared_ptr<nn::Module> net;
  std::unique_ptr<parallel::ReplicatedModule> model;
  std::unique_ptr<parallel::ReplicatedOptimizer> optimizer;
  std::unique_ptr<parallel::TrainingStep> step;
};

// The eager step: the reference of every run.
constexpr parallel::TrainingStepOptions kEager{.capture = false};

std::pair<Tensor, Tensor> batch_of(int step, int64_t rows) {
  return {seeded_randn({rows, 4}, Device::cpu(), 200 + step), seeded_randn({rows, 2}, Device::cpu(), 700 + step)};
}

// How run() hands each batch to the step.
enum class Feed { Chunks, Whole };

// `steps` steps of `rows` rows through setup.step: as chunks scattered over the devices (torch.chunk's cut), or as
// the whole batch on the host. `between` runs after each step. Returns the losses.
std::vector<float> run(Replicas& setup, Feed feed, int steps, int64_t rows,
                       const std::function<void(int)>& between = nullptr) {
  std::vector<float> losses;
  for (int step = 0; step < steps; ++step) {
    const auto [features, targets] = batch_of(step, rows);
    Tensor loss;
    if (feed == Feed::Chunks) {
      const std::vector<Device>& devices = setup.model->devices();
      loss = setup.step->step({.inputs = comm::scatter(features, devices), .labels = comm::scatter(targets, devices)});
    } else {
      loss = setup.step->step({.features = features, .targets = targets});
    }
    losses.push_back(loss.item<float>());
    if (between) between(step);
  }
  return losses;
}

TEST(TrainingStepChunks, EqualTheWholeBatchStepExactlyOnCpuDevices) {
  const std::vector<Device> devices = {Device::cpu(0), Device::cpu(1)};
  Replicas chunked(devices);
  Replicas whole(devices, kEager);
  EXPECT_EQ(run(chunked, Feed::Chunks, 5, 7), run(whole, Feed::Whole, 5, 7));
  expect_parameters_close(*chunked.net, *whole.net, 0.0, 0.0);
  const parallel::TrainingStep& step = *chunked.step;
  EXPECT_FALSE(step.captured());
  EXPECT_FALSE(step.warming_up());
  EXPECT_EQ(step.fallback_reason(), "capture needs CUDA devices, but the model runs on cpu:0");
  EXPECT_EQ(step.blocker(), step.fallback_reason());
  EXPECT_EQ(step.captures(), 0u);
}

// Chunks of any cut (each with a row at least, on a prefix of the devices): the whole batch's step with the same
// device_rows, bit for bit, and the batch's mean loss whatever the cut (against one device, within rounding).
TEST(TrainingStepChunks, TakeAnyCutAndEqualTheWholeBatchWithItsDeviceRows) {
  const std::vector<Device> devices = {Device::cpu(0), Device::cpu(1)};
  Replicas chunked(devices);
  Replicas whole(devices, kEager);
  Replicas alone({Device::cpu(0)}, kEager);
  // 7 rows: torch.chunk's cut would be 4 and 3.
  const std::vector<std::vector<int64_t>> cuts = {{3, 4}, {6, 1}, {7}, {1, 6}};
  for (int s = 0; s < 8; ++s) {
    const std::vector<int64_t>& cut = cuts[static_cast<size_t>(s) % cuts.size()];
    SCOPED_TRACE("step " + std::to_string(s) + ", " + std::to_string(cut.size()) + " chunks");
    const auto [features, targets] = batch_of(s, 7);
    const std::vector<Device> used(devices.begin(), devices.begin() + static_cast<std::ptrdiff_t>(cut.size()));
    const float loss =
        chunked.step->step({.inputs = comm::scatter(features, used, cut), .labels = comm::scatter(targets, used, cut)})
            .item<float>();
    const float expected =
        whole.step->step({.features = features, .targets = targets, .device_rows = cut}).item<float>();
    EXPECT_EQ(loss, expected);
    const float one_device = alone.step->step({.features = features, .targets = targets}).item<float>();
    EXPECT_NEAR(loss, one_device, 1e-6 * std::abs(one_device) + 1e-7);
    expect_parameters_close(*chunked.net, *whole.net, 0.0, 0.0);
    for (size_t d = 1; d < devices.size(); ++d)
      expect_parameters_close(*chunked.model->replicas()[d], *chunked.net, 0.0, 0.0);
  }
  expect_parameters_close(*chunked.net, *alone.net, 1e-5, 1e-6);
}

TEST(TrainingStepChunks, RejectsBadChunks) {
  const std::vector<Device> devices = {Device::cpu(0), Device::cpu(1)};
  Replicas setup(devices);
  parallel::TrainingStep& step = *setup.step;
  const auto [features, targets] = batch_of(0, 7);
  const std::vector<Tensor> x = comm::scatter(features, devices);  // 4 and 3 rows
  const std::vector<Tensor> y = comm::scatter(targets, devices);
  EXPECT_ERROR(step.step({.inputs = {}, .labels = {}}),
               "parallel::TrainingStep::step: the batch holds neither features and targets nor chunks, but a model "
               "that is not reduced across processes needs at least one row");
  EXPECT_ERROR(step.step({.inputs = x, .labels = {y[0]}}),
               "parallel::TrainingStep::step: got 2 chunks of features and 1 of targets but expected as many, up to "
               "the model's 2 devices");
  EXPECT_ERROR(step.step({.inputs = {x[0], x[1], x[1]}, .labels = {y[0], y[1], y[1]}}),
               "got 3 chunks of features and 3 of targets");
  EXPECT_ERROR(step.step({.inputs = {x[0], x[1].to(Device::cpu(0))}, .labels = y}),
               "parallel::TrainingStep::step: features chunk 1 is on cpu:0 but expected the model's device cpu:1");
  EXPECT_ERROR(step.step({.inputs = x, .labels = {y[0], y[1].to(Device::cpu(0))}}),
               "parallel::TrainingStep::step: targets chunk 1 is on cpu:0 but expected the model's device cpu:1");
  EXPECT_ERROR(step.step({.inputs = {x[0], Tensor::zeros({3, 5}, Device::cpu(1))}, .labels = y}),
               "parallel::TrainingStep::step: features chunk 1 has shape [3, 5] and dtype float32 but chunk 0 has "
               "[4, 4] and float32; expected the same beyond the rows");
  EXPECT_ERROR(step.step({.inputs = {x[0], x[1]}, .labels = {y[0], y[0].to(Device::cpu(1))}}),
               "parallel::TrainingStep::step: chunk 1 holds features of shape [3, 4] and targets of shape [4, 2] but "
               "expected the same number of rows");
  EXPECT_ERROR(step.step({.inputs = {Tensor::zeros({0, 4})}, .labels = {Tensor::zeros({0, 2})}}),
               "parallel::TrainingStep::step: chunk 0 has no rows; expected at least one");
  // Nothing was stepped by the refused calls.
  Replicas untouched(devices);
  expect_parameters_close(*setup.net, *untouched.net, 0.0, 0.0);
}

// A process's chunks of a global batch (any cut, here 3 and 1 rows), each loss weighted by its rows over the global
// batch's (8: as if other processes held 4 more), through setup.step: as the chunks, or (Feed::Whole) as the whole
// shard cut by device_rows. Returns the losses.
std::vector<float> run_shards(Replicas& setup, Feed feed, int steps) {
  const std::vector<Device>& devices = setup.model->devices();
  std::vector<float> losses;
  for (int step = 0; step < steps; ++step) {
    const auto [features, targets] = batch_of(step, 4);
    const Tensor loss =
        feed == Feed::Chunks
            ? setup.step->step({.inputs = comm::scatter(features, devices, {3, 1}),
                                .labels = comm::scatter(targets, devices, {3, 1}),
                                .global_rows = 8})
            : setup.step->step({.features = features, .targets = targets, .device_rows = {3, 1}, .global_rows = 8});
    losses.push_back(loss.item<float>());
  }
  return losses;
}

TEST(TrainingStepShards, WeighByTheGlobalRowsAndTakeAnyCutOnCpuDevices) {
  const std::vector<Device> devices = {Device::cpu(0), Device::cpu(1)};
  Replicas sharded(devices);
  Replicas eager(devices, kEager);
  const std::vector<float> losses = run_shards(sharded, Feed::Chunks, 4);
  EXPECT_EQ(losses, run_shards(eager, Feed::Whole, 4));
  expect_parameters_close(*sharded.net, *eager.net, 0.0, 0.0);
  EXPECT_EQ(sharded.step->fallback_reason(), "capture needs CUDA devices, but the model runs on cpu:0");
  // The loss is this shard's part of the global batch's mean: half the shard's own mean loss (4 of 8 rows).
  Replicas own(devices, kEager);
  const auto [features, targets] = batch_of(0, 4);
  const float own_loss = own.step->step({.features = features, .targets = targets}).item<float>();
  EXPECT_NEAR(losses[0], 0.5f * own_loss, 1e-6 * std::abs(own_loss) + 1e-7);
}

TEST(TrainingStepShards, RejectsBadShards) {
  const std::vector<Device> devices = {Device::cpu(0), Device::cpu(1)};
  Replicas setup(devices);
  parallel::TrainingStep& step = *setup.step;
  const auto [features, targets] = batch_of(0, 4);
  const std::vector<Tensor> x = comm::scatter(features, devices, {3, 1});
  const std::vector<Tensor> y = comm::scatter(targets, devices, {3, 1});
  EXPECT_ERROR(step.step({.inputs = x, .labels = y, .global_rows = 3}),
               "parallel::TrainingStep::step: global_rows is 3 but this process alone has 4 rows");
  EXPECT_ERROR(step.step({.global_rows = 4}),
               "holds neither features and targets nor chunks, but a model that is "
               "not reduced across processes");
  EXPECT_ERROR(step.step({.inputs = x, .labels = {y[0]}, .global_rows = 4}),
               "got 2 chunks of features and 1 of targets");
  EXPECT_ERROR(step.step({.inputs = {x[1].to(Device::cpu(0)), x[0].to(Device::cpu(1))}, .labels = y, .global_rows = 4}),
               "parallel::TrainingStep::step: chunk 0 holds features of shape [1, 4] and targets of shape [3, 2]");
  EXPECT_ERROR(step.step({.inputs = {x[0], x[1].to(Device::cpu(0))}, .labels = y, .global_rows = 4}),
               "parallel::TrainingStep::step: features chunk 1 is on cpu:0 but expected the model's device cpu:1");
  EXPECT_ERROR(step.step({.inputs = x, .labels = y, .global_rows = 4, .loss_out = Tensor::zeros({2}, Device::cpu(0))}),
               "parallel::TrainingStep::step: loss_out is of shape [2]");
  Replicas untouched(devices);
  expect_parameters_close(*setup.net, *untouched.net, 0.0, 0.0);
}

// ---- CUDA --------------------------------------------------------------------------------------------------

class TrainingStepChunksOnGpus : public OneAndTwoGpus {};

TEST_P(TrainingStepChunksOnGpus, EqualTheEagerStepAndShareTheWholeBatchGraph) {
  Replicas chunked(devices());
  Replicas whole(devices(), kEager);
  const std::vector<float> losses = run(chunked, Feed::Chunks, 12, 96);
  const std::vector<float> expected = run(whole, Feed::Whole, 12, 96);
  for (size_t i = 0; i < losses.size(); ++i) EXPECT_NEAR(losses[i], expected[i], 1e-6 * std::abs(expected[i]) + 1e-7);
  expect_parameters_close(*chunked.net, *whole.net, 1e-6, 1e-7);
  parallel::TrainingStep& step = *chunked.step;
  EXPECT_TRUE(step.captured()) << step.fallback_reason();
  EXPECT_EQ(step.captures(), 1u);
  // The whole batch of the same shape replays the same graph.
  const auto [features, targets] = batch_of(50, 96);
  step.step({.features = features.to(devices()[0]), .targets = targets.to(devices()[0])});
  EXPECT_TRUE(step.captured());
  EXPECT_EQ(step.graphs(), 1u);
  EXPECT_EQ(step.captures(), 1u);
}

TEST_P(TrainingStepChunksOnGpus, KeepGraphsWhenModesAreSwitchedBack) {
  Replicas setup(devices());
  parallel::TrainingStep& step = *setup.step;
  run(setup, Feed::Chunks, 8, 64, [&](int) { nn::TrainingModeGuard eval_mode(*setup.net, /*training=*/false); });
  EXPECT_TRUE(step.captured()) << step.fallback_reason();
  EXPECT_EQ(step.captures(), 1u);
  setup.net->eval();  // a mode the graph was not captured in: captured again
  run(setup, Feed::Chunks, 1, 64);
  EXPECT_TRUE(step.captured());
  EXPECT_EQ(step.captures(), 2u);
}

// A shard's graph, cut other than torch.chunk's on two GPUs: its replays equal the eager step with the same weights
// (rows over the global batch's).
TEST_P(TrainingStepChunksOnGpus, ShardsReplayTheEagerStepWithTheGlobalWeights) {
  Replicas sharded(devices());
  Replicas eager(devices(), kEager);
  const std::vector<int64_t> cut = devices().size() == 1 ? std::vector<int64_t>{48} : std::vector<int64_t>{40, 8};
  for (int s = 0; s < 6; ++s) {
    const auto [features, targets] = batch_of(s, 48);
    const std::vector<Tensor> x = comm::scatter(features, devices(), cut);
    const std::vector<Tensor> y = comm::scatter(targets, devices(), cut);
    const float loss = sharded.step->step({.inputs = x, .labels = y, .global_rows = 96}).item<float>();
    EXPECT_EQ(sharded.step->captured(), s >= 2) << sharded.step->fallback_reason();
    const float expected = eager.step->step({.inputs = x, .labels = y, .global_rows = 96}).item<float>();
    EXPECT_NEAR(loss, expected, 1e-6 * std::abs(expected) + 1e-7);
  }
  expect_parameters_close(*sharded.net, *eager.net, 1e-6, 1e-7);
  EXPECT_EQ(sharded.step->captures(), 1u);
}

TANDEM_INSTANTIATE_ON_ONE_AND_TWO_GPUS(TrainingStepChunksOnGpus);

}  // namespace
}  // namespace tandem::testing
