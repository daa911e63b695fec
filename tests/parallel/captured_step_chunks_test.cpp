// parallel::CapturedStep fed a batch already cut over the devices (step_chunks, as a TensorDataLoader
// delivers it): the same step as the whole batch's, its checks of the chunks, and graphs that survive an evaluation
// in eval mode between steps.

#include <functional>
#include <memory>
#include <vector>

#include "parallel/parallel_test_helpers.h"
#include "support/one_and_two_gpus.h"
#include "tandem/comm/comm.h"
#include "tandem/nn/training_mode_guard.h"
#include "tandem/parallel/captured_step.h"

namespace tandem::testing {
namespace {

// A net (make_net: 4 inputs, 2 outputs) replicated over `devices`, with SGD and momentum over the replicas.
struct Replicas {
  explicit Replicas(const std::vector<Device>& devices)
      : net(make_net(devices[0])),
        model(std::make_unique<parallel::ReplicatedModule>(net, devices)),
        optimizer(std::make_unique<parallel::ReplicatedSGD>(*model, optim::SGDOptions{.lr = 0.05, .momentum = 0.9})) {}
  std::shared_ptr<nn::Module> net;
  std::unique_ptr<parallel::ReplicatedModule> model;
  std::unique_ptr<parallel::ReplicatedOptimizer> optimizer;
};

std::pair<Tensor, Tensor> batch_of(int step, int64_t rows) {
  return {seeded_randn({rows, 4}, Device::cpu(), 200 + step), seeded_randn({rows, 2}, Device::cpu(), 700 + step)};
}

// `steps` steps of `rows` rows: through `captured` as chunks scattered over the devices, or (null) eagerly on the
// whole batch. `between` runs after each step. Returns the losses.
std::vector<float> run(Replicas& setup, parallel::CapturedStep* captured, int steps, int64_t rows,
                       const std::function<void(int)>& between = nullptr) {
  std::vector<float> losses;
  for (int step = 0; step < steps; ++step) {
    const auto [features, targets] = batch_of(step, rows);
    Tensor loss;
    if (captured != nullptr) {
      const std::vector<Device>& devices = setup.model->devices();
      loss = captured->step_chunks(comm::scatter(features, devices), comm::scatter(targets, devices));
    } else {
      loss = parallel::data_parallel_step(*setup.model, *setup.optimizer, features, targets);
    }
    losses.push_back(loss.item<float>());
    if (between) between(step);
  }
  return losses;
}

TEST(CapturedStepChunks, EqualTheWholeBatchStepExactlyOnCpuDevices) {
  const std::vector<Device> devices = {Device::cpu(0), Device::cpu(1)};
  Replicas chunked(devices);
  Replicas whole(devices);
  parallel::CapturedStep step(*chunked.model, *chunked.optimizer, nn::mse_loss);
  EXPECT_EQ(run(chunked, &step, 5, 7), run(whole, nullptr, 5, 7));
  expect_parameters_close(*chunked.net, *whole.net, 0.0, 0.0);
  EXPECT_FALSE(step.captured());
  EXPECT_FALSE(step.warming_up());
  EXPECT_EQ(step.fallback_reason(), "capture needs CUDA devices, but the model runs on cpu:0");
  EXPECT_EQ(step.blocker(), step.fallback_reason());
  EXPECT_EQ(step.captures(), 0u);
}

TEST(CapturedStepChunks, RejectsChunksThatAreNotTheScatterCut) {
  const std::vector<Device> devices = {Device::cpu(0), Device::cpu(1)};
  Replicas setup(devices);
  parallel::CapturedStep step(*setup.model, *setup.optimizer, nn::mse_loss);
  const auto [features, targets] = batch_of(0, 7);
  const std::vector<Tensor> x = comm::scatter(features, devices);  // 4 and 3 rows
  const std::vector<Tensor> y = comm::scatter(targets, devices);
  EXPECT_ERROR(
      step.step_chunks(std::vector<Tensor>{}, std::vector<Tensor>{}),
      "parallel::CapturedStep::step_chunks: got 0 chunks of features and 0 of targets but expected as many, from 1 "
      "to the model's 2 devices");
  EXPECT_ERROR(step.step_chunks(x, {y[0]}), "got 2 chunks of features and 1 of targets");
  EXPECT_ERROR(step.step_chunks({x[0], x[1], x[1]}, {y[0], y[1], y[1]}), "got 3 chunks of features and 3 of targets");
  EXPECT_ERROR(
      step.step_chunks({x[0], x[1].to(Device::cpu(0))}, y),
      "parallel::CapturedStep::step_chunks: features chunk 1 is on cpu:0 but expected the model's device cpu:1");
  EXPECT_ERROR(
      step.step_chunks({x[0], Tensor::zeros({3, 5}, Device::cpu(1))}, y),
      "parallel::CapturedStep::step_chunks: features chunk 1 has shape [3, 5] and dtype float32 but chunk 0 has "
      "[4, 4] and float32; expected the same beyond the rows");
  EXPECT_ERROR(
      step.step_chunks({x[1].to(Device::cpu(0)), x[0].to(Device::cpu(1))},
                       {y[1].to(Device::cpu(0)), y[0].to(Device::cpu(1))}),
      "parallel::CapturedStep::step_chunks: chunk 0 has 3 rows but torch.chunk's cut of 7 rows over 2 devices gives "
      "it 4");
  EXPECT_ERROR(
      step.step_chunks({features.narrow(0, 0, 4)}, {targets.narrow(0, 0, 4)}),
      "parallel::CapturedStep::step_chunks: got 1 chunks of 4 rows but torch.chunk cuts them into 2 for 2 devices");
  EXPECT_ERROR(
      step.step_chunks({x[0], x[1]}, {y[0], y[0].to(Device::cpu(1))}),
      "parallel::CapturedStep::step_chunks: features of shape [3, 4] and targets of shape [4, 2] but expected the "
      "same number of rows");
  EXPECT_ERROR(step.step_chunks({Tensor::zeros({0, 4})}, {Tensor::zeros({0, 2})}),
               "parallel::CapturedStep::step_chunks: the batch has no rows; expected at least one");
  // Nothing was stepped by the refused calls.
  Replicas untouched(devices);
  expect_parameters_close(*setup.net, *untouched.net, 0.0, 0.0);
}

// step_shard: a process's chunks of a global batch (any cut, here 3 and 1 rows), each loss weighted by its rows over
// the global batch's (8: as if other processes held 4 more): the eager step with those weights, exactly.
std::vector<float> run_shards(Replicas& setup, parallel::CapturedStep* captured, int steps) {
  const std::vector<Device>& devices = setup.model->devices();
  std::vector<float> losses;
  for (int step = 0; step < steps; ++step) {
    const auto [features, targets] = batch_of(step, 4);
    const std::vector<Tensor> x = comm::scatter(features, devices, {3, 1});
    const std::vector<Tensor> y = comm::scatter(targets, devices, {3, 1});
    const Tensor loss = captured != nullptr
                            ? captured->step_shard(x, y, 8)
                            : parallel::placed_data_parallel_step(*setup.model, *setup.optimizer, x, y, 8);
    losses.push_back(loss.item<float>());
  }
  return losses;
}

TEST(CapturedStepShards, WeighByTheGlobalRowsAndTakeAnyCutOnCpuDevices) {
  const std::vector<Device> devices = {Device::cpu(0), Device::cpu(1)};
  Replicas sharded(devices);
  Replicas eager(devices);
  parallel::CapturedStep step(*sharded.model, *sharded.optimizer, nn::mse_loss);
  EXPECT_EQ(run_shards(sharded, &step, 4), run_shards(eager, nullptr, 4));
  expect_parameters_close(*sharded.net, *eager.net, 0.0, 0.0);
  EXPECT_EQ(step.fallback_reason(), "capture needs CUDA devices, but the model runs on cpu:0");
}

TEST(CapturedStepShards, RejectsBadShards) {
  const std::vector<Device> devices = {Device::cpu(0), Device::cpu(1)};
  Replicas setup(devices);
  parallel::CapturedStep step(*setup.model, *setup.optimizer, nn::mse_loss);
  const auto [features, targets] = batch_of(0, 4);
  const std::vector<Tensor> x = comm::scatter(features, devices, {3, 1});
  const std::vector<Tensor> y = comm::scatter(targets, devices, {3, 1});
  EXPECT_ERROR(step.step_shard(x, y, 3),
               "parallel::CapturedStep::step_shard: global_rows is 3 but this process alone has 4 rows");
  EXPECT_ERROR(step.step_shard({}, {}, 4), "got no chunks, but a model that is not reduced across processes");
  EXPECT_ERROR(step.step_shard(x, {y[0]}, 4), "got 2 chunks of features and 1 of targets");
  EXPECT_ERROR(step.step_shard({x[1].to(Device::cpu(0)), x[0].to(Device::cpu(1))}, y, 4),
               "parallel::CapturedStep::step_shard: features of shape [1, 4] and targets of shape [3, 2]");
  EXPECT_ERROR(step.step_shard({x[0], x[1].to(Device::cpu(0))}, y, 4),
               "parallel::CapturedStep::step_shard: features chunk 1 is on cpu:0 but expected the model's device cpu:1");
  EXPECT_ERROR(step.step_shard(x, y, 4, Tensor::zeros({2}, Device::cpu(0))),
               "parallel::CapturedStep::step_shard: loss_out is of shape [2]");
  Replicas untouched(devices);
  expect_parameters_close(*setup.net, *untouched.net, 0.0, 0.0);
}

// ---- CUDA --------------------------------------------------------------------------------------------------

class CapturedStepChunksOnGpus : public OneAndTwoGpus {};

TEST_P(CapturedStepChunksOnGpus, EqualTheEagerStepAndShareTheWholeBatchGraph) {
  Replicas chunked(devices());
  Replicas whole(devices());
  parallel::CapturedStep step(*chunked.model, *chunked.optimizer, nn::mse_loss);
  const std::vector<float> losses = run(chunked, &step, 12, 96);
  const std::vector<float> expected = run(whole, nullptr, 12, 96);
  for (size_t i = 0; i < losses.size(); ++i) EXPECT_NEAR(losses[i], expected[i], 1e-6 * std::abs(expected[i]) + 1e-7);
  expect_parameters_close(*chunked.net, *whole.net, 1e-6, 1e-7);
  EXPECT_TRUE(step.captured()) << step.fallback_reason();
  EXPECT_EQ(step.captures(), 1u);
  // The whole batch of the same shape replays the same graph.
  const auto [features, targets] = batch_of(50, 96);
  step.step(features.to(devices()[0]), targets.to(devices()[0]));
  EXPECT_TRUE(step.captured());
  EXPECT_EQ(step.graphs(), 1u);
  EXPECT_EQ(step.captures(), 1u);
}

TEST_P(CapturedStepChunksOnGpus, KeepGraphsWhenModesAreSwitchedBack) {
  Replicas setup(devices());
  parallel::CapturedStep step(*setup.model, *setup.optimizer, nn::mse_loss);
  run(setup, &step, 8, 64, [&](int) { nn::TrainingModeGuard eval_mode(*setup.net, /*training=*/false); });
  EXPECT_TRUE(step.captured()) << step.fallback_reason();
  EXPECT_EQ(step.captures(), 1u);
  setup.net->eval();  // a mode the graph was not captured in: captured again
  run(setup, &step, 1, 64);
  EXPECT_TRUE(step.captured());
  EXPECT_EQ(step.captures(), 2u);
}

// A shard's graph: its replays equal the eager step with the same weights (rows over the global batch's).
TEST_P(CapturedStepChunksOnGpus, ShardsReplayTheEagerStepWithTheGlobalWeights) {
  Replicas sharded(devices());
  Replicas eager(devices());
  parallel::CapturedStep step(*sharded.model, *sharded.optimizer, nn::mse_loss);
  parallel::CapturedStep eager_step(*eager.model, *eager.optimizer, nn::mse_loss, {.enabled = false});
  const std::vector<int64_t> cut = devices().size() == 1 ? std::vector<int64_t>{48} : std::vector<int64_t>{40, 8};
  for (int s = 0; s < 6; ++s) {
    const auto [features, targets] = batch_of(s, 48);
    const std::vector<Tensor> x = comm::scatter(features, devices(), cut);
    const std::vector<Tensor> y = comm::scatter(targets, devices(), cut);
    const float loss = step.step_shard(x, y, 96).item<float>();
    EXPECT_EQ(step.captured(), s >= 2) << step.fallback_reason();
    const float expected = eager_step.step_shard(x, y, 96).item<float>();
    EXPECT_NEAR(loss, expected, 1e-6 * std::abs(expected) + 1e-7);
  }
  expect_parameters_close(*sharded.net, *eager.net, 1e-6, 1e-7);
  EXPECT_EQ(step.captures(), 1u);
}

TANDEM_INSTANTIATE_ON_ONE_AND_TWO_GPUS(CapturedStepChunksOnGpus);

}  // namespace
}  // namespace tandem::testing
