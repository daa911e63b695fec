// parallel::TrainingStep: the step captured as one CUDA graph and replayed, against the eager TrainingStep
// (TrainingStepOptions::capture false) from the same start, Dropout's included; its fallbacks (CPU devices, random
// draws made on the host, max_graphs), its checks of the batch, and the pieces it is built from that run on CPU
// devices too (replayed optimizer steps, DeviceScalars, DeviceGraph's checks).

#include "tandem/parallel/training_step.h"

#include <unistd.h>

#include <functional>
#include <memory>

#include "parallel/parallel_test_helpers.h"
#include "support/one_and_two_gpus.h"
#include "tandem/comm/comm.h"

namespace tandem::testing {
namespace {

using OptimizerFactory =
    std::function<std::unique_ptr<parallel::ReplicatedOptimizer>(parallel::ReplicatedModule& model)>;

std::unique_ptr<parallel::ReplicatedOptimizer> sgd_momentum(parallel::ReplicatedModule& model) {
  return std::make_unique<parallel::ReplicatedSGD>(model, optim::SGDOptions{.lr = 0.05, .momentum = 0.9});
}

std::unique_ptr<parallel::ReplicatedOptimizer> adamw(parallel::ReplicatedModule& model) {
  return std::make_unique<parallel::ReplicatedAdamW>(model, optim::AdamWOptions{.lr = 0.01, .weight_decay = 0.05});
}

// The seed net's shape (Linear(10, 20) -> tanh -> Linear(20, 1)), optionally with Dropout after the hidden layer.
class SeedNet : public nn::Cloneable<SeedNet> {
 public:
  SeedNet(Device device, double dropout) {
    manual_seed(4321);
    fc1 = std::make_shared<nn::Linear>(10, 20, true, device);
    fc2 = std::make_shared<nn::Linear>(20, 1, true, device);
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    if (dropout > 0.0) {
      drop = std::make_shared<nn::Dropout>(dropout);
      register_module("drop", drop);
    }
  }
  Tensor forward(const Tensor& x) override {
    Tensor hidden = tanh(fc1->forward(x));
    if (drop) hidden = drop->forward(hidden);
    return fc2->forward(hidden);
  }
  std::shared_ptr<nn::Linear> fc1, fc2;
  std::shared_ptr<nn::Dropout> drop;
};

// One training setup: a net replicated over `devices` and an optimizer over the replicas.
struct Training {
  Training(const std::vector<Device>& devices, const OptimizerFactory& make_optimizer, double dropout = 0.0)
      : net(std::make_shared<SeedNet>(devices[0], dropout)),
        model(std::make_unique<parallel::ReplicatedModule>(net, devices)),
        optimizer(make_optimizer(*model)) {}
  std::shared_ptr<SeedNet> net;
  std::unique_ptr<parallel::ReplicatedModule> model;
  std::unique_ptr<parallel::ReplicatedOptimizer> optimizer;
};

// The batch of step `step`: `rows` rows on `device`, the same on every run.
std::pair<Tensor, Tensor> batch_of(int step, int64_t rows, Device device) {
  return {seeded_randn({rows, 10}, device, 100 + step), seeded_randn({rows, 1}, device, 900 + step)};
}

// What a run does after each step (an LR schedule's step, say), and a maker of one for each run.
using AfterStep = std::function<void(Training&, int step)>;
using AfterStepMaker = std::function<AfterStep()>;

struct RunResult {
  std::vector<float> losses;
  std::vector<bool> captured;
  std::vector<std::string> reasons;
};

// The eager TrainingStep over a setup: the reference the captured runs are compared against.
parallel::TrainingStep eager_step(Training& setup) {
  return parallel::TrainingStep(*setup.model, *setup.optimizer, nn::mse_loss, {.capture = false});
}

// `steps` steps with rows_of(step) rows each, through `step` (over `setup`).
RunResult run(Training& setup, parallel::TrainingStep& step, int steps, const std::function<int64_t(int)>& rows_of,
              const AfterStep& after = nullptr) {
  RunResult result;
  for (int i = 0; i < steps; ++i) {
    const auto [features, targets] = batch_of(i, rows_of(i), setup.model->devices()[0]);
    manual_seed(77 + i);  // Dropout's masks: the same draws in both runs
    const Tensor loss = step.step({.features = features, .targets = targets});
    result.losses.push_back(loss.item<float>());
    result.captured.push_back(step.captured());
    result.reasons.push_back(step.fallback_reason());
    if (after) after(setup, i);
  }
  return result;
}

void expect_runs_equal(const RunResult& actual, const RunResult& expected, double rtol) {
  ASSERT_EQ(actual.losses.size(), expected.losses.size());
  for (size_t i = 0; i < actual.losses.size(); ++i) {
    EXPECT_NEAR(actual.losses[i], expected.losses[i], rtol * std::abs(expected.losses[i]) + 1e-7) << "step " << i;
  }
}

int64_t constant_rows(int) { return 256; }

// ---- CPU devices: the eager fallback, which CI runs ----------------------------------------------------------

TEST(TrainingStep, FallsBackOnCpuDevicesAndEqualsTheEagerStepExactly) {
  const std::vector<Device> devices = {Device::cpu(0), Device::cpu(1)};
  Training captured_setup(devices, sgd_momentum);
  Training eager_setup(devices, sgd_momentum);
  parallel::TrainingStep step(*captured_setup.model, *captured_setup.optimizer, nn::mse_loss);
  parallel::TrainingStep reference = eager_step(eager_setup);
  const RunResult captured = run(captured_setup, step, 5, constant_rows);
  const RunResult eager = run(eager_setup, reference, 5, constant_rows);
  expect_runs_equal(captured, eager, 0.0);
  expect_parameters_close(*captured_setup.net, *eager_setup.net, 0.0, 0.0);
  EXPECT_FALSE(step.captured());
  EXPECT_EQ(step.strategy(), parallel::StepStrategy::StepsInBackward);  // CPU devices sum as each bucket is ready
  EXPECT_EQ(step.graphs(), 0u);
  EXPECT_EQ(step.fallback_reason(), "capture needs CUDA devices, but the model runs on cpu:0");
}

TEST(TrainingStep, CaptureOffRunsEagerlyWithItsReason) {
  const std::vector<Device> devices = {Device::cpu(0)};
  Training setup(devices, adamw);
  parallel::TrainingStep step(*setup.model, *setup.optimizer, nn::mse_loss, {.capture = false});
  run(setup, step, 3, constant_rows);
  EXPECT_FALSE(step.captured());
  EXPECT_EQ(step.fallback_reason(), "capture is off (TrainingStepOptions::capture is false)");
  EXPECT_EQ(step.blocker(), step.fallback_reason());
  EXPECT_EQ(dynamic_cast<optim::AdamW&>(setup.optimizer->optimizer(0)).step_count(0), 3);
}

TEST(TrainingStep, RejectsBadArguments) {
  const std::vector<Device> devices = {Device::cpu(0)};
  Training setup(devices, sgd_momentum);
  EXPECT_ERROR(parallel::TrainingStep(*setup.model, *setup.optimizer, nullptr),
               "parallel::TrainingStep: the loss function is empty");
  EXPECT_ERROR(parallel::TrainingStep(*setup.model, *setup.optimizer, nn::mse_loss, {.warmup_steps = -1}),
               "parallel::TrainingStep: warmup_steps is -1 but expected >= 0");
  Training other(devices, sgd_momentum);
  EXPECT_ERROR(parallel::TrainingStep(*other.model, *setup.optimizer, nn::mse_loss),
               "parallel::TrainingStep: the optimizer was built over another ReplicatedModule than the model it steps");
  parallel::TrainingStep step(*setup.model, *setup.optimizer, nn::mse_loss);
  EXPECT_ERROR(step.step({.features = Tensor::zeros({4, 10}), .targets = Tensor::zeros({3, 1})}),
               "parallel::TrainingStep::step: features of shape [4, 10] and targets of shape [3, 1] but expected "
               "the same number of rows");
  parallel::TrainingStep per_row(*setup.model, *setup.optimizer, [](const Tensor& output, const Tensor&) {
    return output;  // not reduced over the rows
  });
  EXPECT_ERROR(per_row.step({.features = Tensor::zeros({4, 10}), .targets = Tensor::zeros({4, 1})}),
               "parallel::TrainingStep::step: the loss of replica 0 has shape [4, 1] but expected one element");
}

// The batch's checks, each naming what is wrong; a refused batch takes no step.
TEST(TrainingStep, RejectsBadBatches) {
  const std::vector<Device> devices = {Device::cpu(0), Device::cpu(1)};
  Training setup(devices, sgd_momentum);
  parallel::TrainingStep step(*setup.model, *setup.optimizer, nn::mse_loss);
  const auto [x, y] = batch_of(0, 4, devices[0]);
  EXPECT_ERROR(step.step({}),
               "parallel::TrainingStep::step: the batch holds neither features and targets nor chunks, but a model "
               "that is not reduced across processes needs at least one row");
  EXPECT_ERROR(step.step({.features = x, .targets = y, .inputs = comm::scatter(x, devices)}),
               "parallel::TrainingStep::step: the batch holds both features and targets and chunks (inputs, "
               "labels); expected one of the two");
  EXPECT_ERROR(step.step({.features = x}),
               "parallel::TrainingStep::step: the batch holds features but no targets; expected both");
  EXPECT_ERROR(step.step({.targets = y}),
               "parallel::TrainingStep::step: the batch holds targets but no features; expected both");
  EXPECT_ERROR(step.step({.features = x.narrow(0, 0, 0), .targets = y.narrow(0, 0, 0)}),
               "parallel::TrainingStep::step: the batch has no rows; expected at least one");
  EXPECT_ERROR(step.step({.features = x, .targets = y, .device_rows = {1, 1, 2}}),
               "parallel::TrainingStep::step: the batch has device_rows for 3 devices but the model has 2");
  EXPECT_ERROR(step.step({.features = x, .targets = y, .device_rows = {4, 0}}),
               "parallel::TrainingStep::step: device_rows holds 0 but expected >= 1");
  EXPECT_ERROR(step.step({.features = x, .targets = y, .device_rows = {2, 3}}),
               "parallel::TrainingStep::step: device_rows add up to 5 but the batch has 4 rows");
  EXPECT_ERROR(
      step.step({.inputs = comm::scatter(x, devices), .labels = comm::scatter(y, devices), .device_rows = {2, 2}}),
      "parallel::TrainingStep::step: device_rows are for a whole batch (features and targets), but the "
      "batch holds chunks");
  EXPECT_ERROR(step.step({.features = x, .targets = y, .global_rows = -1}),
               "parallel::TrainingStep::step: global_rows is -1 but expected >= 0");
  EXPECT_ERROR(step.step({.features = x, .targets = y, .global_rows = 3}),
               "parallel::TrainingStep::step: global_rows is 3 but this process alone has 4 rows (expected at least "
               "those, and at least 1)");
  Training untouched(devices, sgd_momentum);
  expect_parameters_close(*setup.net, *untouched.net, 0.0, 0.0);
}

// ---- replayed optimizer steps, on CPU devices -----------------------------------------------------------------

// Steps two copies of one net's parameters with the same gradients: `stepped` with step(), `replayed` with one
// step() and then prepare_replay / replayable_step / finish_replay, changing the learning rate every step.
template <class Optimizer, class Options>
void expect_replayed_steps_equal_steps(const Options& options) {
  const Device device = Device::cpu(0);
  auto stepped_net = make_net(device);
  auto replayed_net = make_net(device);
  Optimizer stepped(stepped_net->parameters(), options);
  Optimizer replayed(replayed_net->parameters(), options);
  for (int step = 0; step < 6; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const Tensor x = seeded_randn({5, 4}, device, 10 + step);
    for (auto* net : {stepped_net.get(), replayed_net.get()}) {
      net->zero_grad();
      sum(net->forward(x)).backward();
    }
    const double lr = 0.02 / (1.0 + step);
    stepped.set_lr(lr);
    replayed.set_lr(lr);
    stepped.step();
    if (step == 0) {
      replayed.step();
    } else {
      replayed.prepare_replay();
      replayed.replayable_step();
      replayed.finish_replay();
    }
    expect_parameters_close(*replayed_net, *stepped_net, 0.0, 0.0);
  }
  const optim::OptimizerState a = stepped.state_dict();
  const optim::OptimizerState b = replayed.state_dict();
  ASSERT_EQ(a.parameters.size(), b.parameters.size());
  for (size_t i = 0; i < a.parameters.size(); ++i) EXPECT_EQ(a.parameters[i].step, b.parameters[i].step);
}

TEST(ReplayedOptimizerStep, SgdWithMomentumEqualsStep) {
  expect_replayed_steps_equal_steps<optim::SGD>(
      optim::SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
}

TEST(ReplayedOptimizerStep, AdamWEqualsStepAndCountsSteps) {
  expect_replayed_steps_equal_steps<optim::AdamW>(optim::AdamWOptions{.lr = 0.01, .weight_decay = 0.1});
}

TEST(ReplayedOptimizerStep, AdamWithAmsgradEqualsStep) {
  expect_replayed_steps_equal_steps<optim::Adam>(optim::AdamOptions{.lr = 0.01, .weight_decay = 0.1, .amsgrad = true});
}

TEST(ReplayedOptimizerStep, NeedsStateAndAPreparedBuffer) {
  auto net = make_net(Device::cpu(0));
  sum(net->forward(seeded_randn({2, 4}, Device::cpu(0), 3))).backward();
  optim::SGD sgd(net->parameters(), {.lr = 0.1, .momentum = 0.9});
  EXPECT_ERROR(sgd.replayable_step(), "optim::SGD::replayable_step: prepare_replay() has not run yet");
  sgd.prepare_replay();
  EXPECT_ERROR(sgd.replayable_step(),
               "optim::SGD::replayable_step: parameter 0 has no momentum buffer yet but expected one");
  optim::Adam adam(net->parameters());
  adam.prepare_replay();
  EXPECT_ERROR(adam.replayable_step(), "optim::Adam::replayable_step: parameter 0 has no moments yet");
  EXPECT_TRUE(sgd.replayable());
}

TEST(ReplayedOptimizerStep, NeedsEveryParameterOnOneDevice) {
  const Tensor a = Tensor::zeros({2}, Device::cpu(0)).set_requires_grad(true);
  const Tensor b = Tensor::zeros({2}, Device::cpu(1)).set_requires_grad(true);
  optim::SGD sgd({a, b}, {.lr = 0.1});
  EXPECT_ERROR(sgd.prepare_replay(), "optim::SGD::prepare_replay: parameter 1 is on cpu:1 but parameter 0 is on cpu:0");
}

TEST(FusedUpdates, RejectHyperParametersOfTheWrongShape) {
  const Tensor param = Tensor::zeros({3});
  const Tensor grad = Tensor::ones({3});
  EXPECT_ERROR(sgd_update(param, grad, Tensor(), SgdUpdate{}, Tensor::zeros({2})),
               "sgd_update: lr has shape [2] but expected 1 contiguous elements");
  EXPECT_ERROR(
      adam_update(param, grad, Tensor::zeros({3}), Tensor::zeros({3}), Tensor(), AdamUpdate{}, Tensor::zeros({2})),
      "adam_update: step_factors has shape [2] but expected 3 contiguous elements");
  sgd_update(param, grad, Tensor(), SgdUpdate{.lr = 5.0f}, Tensor::full({1}, 0.5, DType::Float32));
  expect_values(param, {-0.5, -0.5, -0.5}, {3});
}

TEST(DeviceScalars, UploadsOnCpuDevices) {
  DeviceScalars scalars(Device::cpu(1), 2);
  expect_values(scalars.values(), {0.0, 0.0}, {2});
  scalars.upload({1.5f, -2.0f});
  expect_values(scalars.values(), {1.5, -2.0}, {2});
  EXPECT_EQ(scalars.values().device(), Device::cpu(1));
  EXPECT_ERROR(scalars.upload({1.0f}), "DeviceScalars::upload: got 1 values but expected 2");
  EXPECT_ERROR(DeviceScalars(Device::cpu(0), 0), "DeviceScalars: got a count of 0");
}

TEST(TrainingStep, WritesTheLossIntoLossOutOnCpuDevices) {
  const std::vector<Device> devices = {Device::cpu(0), Device::cpu(1)};
  Training slotted_setup(devices, sgd_momentum);
  Training plain_setup(devices, sgd_momentum);
  parallel::TrainingStep slotted(*slotted_setup.model, *slotted_setup.optimizer, nn::mse_loss);
  parallel::TrainingStep plain(*plain_setup.model, *plain_setup.optimizer, nn::mse_loss);
  const Tensor losses = Tensor::zeros({4}, devices[0]);
  for (int i = 0; i < 4; ++i) {
    const auto [features, targets] = batch_of(i, 64, devices[0]);
    const Tensor slot = losses.narrow(0, i, 1);
    const Tensor written = i % 2 == 0 ? slotted.step({.features = features, .targets = targets, .loss_out = slot})
                                      : slotted.step({.inputs = comm::scatter(features, devices),
                                                      .labels = comm::scatter(targets, devices),
                                                      .loss_out = slot});
    EXPECT_TRUE(written.is_same(slot));
    EXPECT_EQ(losses.to_vector()[static_cast<size_t>(i)],
              plain.step({.features = features, .targets = targets}).item<float>());
  }
  expect_parameters_close(*slotted_setup.net, *plain_setup.net, 0.0, 0.0);

  const auto [features, targets] = batch_of(0, 64, devices[0]);
  EXPECT_ERROR(slotted.step({.features = features, .targets = targets, .loss_out = Tensor::zeros({2}, devices[0])}),
               "parallel::TrainingStep::step: loss_out is of shape [2] and dtype float32 on cpu:0 but expected one "
               "float32 element on cpu:0");
  EXPECT_ERROR(
      slotted.step(
          {.features = features, .targets = targets, .loss_out = Tensor::zeros({1}, DType::Int64, devices[0])}),
      "parallel::TrainingStep::step: loss_out is of shape [1] and dtype int64 on cpu:0 but expected one "
      "float32 element on cpu:0");
  EXPECT_ERROR(slotted.step({.inputs = comm::scatter(features, devices),
                             .labels = comm::scatter(targets, devices),
                             .loss_out = Tensor::zeros({1}, devices[1])}),
               "parallel::TrainingStep::step: loss_out is of shape [1] and dtype float32 on cpu:1 but expected");
  // A rejected loss_out takes no step.
  expect_parameters_close(*slotted_setup.net, *plain_setup.net, 0.0, 0.0);
}

TEST(DeviceGraph, CaptureNeedsCudaDevices) {
  DeviceGraph graph;
  EXPECT_ERROR(graph.begin_capture({Device::cpu(0)}),
               "DeviceGraph::begin_capture: got cpu:0 but capture needs CUDA devices");
  EXPECT_ERROR(graph.begin_capture({}), "DeviceGraph::begin_capture: got no devices");
  EXPECT_ERROR(
      graph.begin_capture({Device::cuda(0), Device::cuda(0)}),
      "DeviceGraph::begin_capture: device cuda:0 appears twice (devices 0 and 1) but expected distinct devices");
  EXPECT_ERROR(graph.replay(), "DeviceGraph::replay: nothing was captured");
  const Tensor x = Tensor::zeros({2});
  const std::vector<DeviceGraph::Feed> feeds = {{.from = x, .to = x}};
  EXPECT_ERROR(graph.replay(feeds), "DeviceGraph::replay: nothing was captured");
  EXPECT_FALSE(graph.capturing());
  EXPECT_FALSE(graph.ready());
}

// ---- CUDA: captured against eager ---------------------------------------------------------------------------

// 20 captured steps against 20 eager ones from the same start: equal losses and parameters.
void expect_captured_equals_eager(const std::vector<Device>& devices, const OptimizerFactory& make_optimizer,
                                  const std::function<int64_t(int)>& rows_of, const AfterStepMaker& make_after,
                                  size_t expected_graphs) {
  Training captured_setup(devices, make_optimizer);
  Training eager_setup(devices, make_optimizer);
  parallel::TrainingStep step(*captured_setup.model, *captured_setup.optimizer, nn::mse_loss);
  parallel::TrainingStep reference = eager_step(eager_setup);
  const RunResult captured = run(captured_setup, step, 20, rows_of, make_after ? make_after() : nullptr);
  const RunResult eager = run(eager_setup, reference, 20, rows_of, make_after ? make_after() : nullptr);
  expect_runs_equal(captured, eager, 1e-6);
  expect_parameters_close(*captured_setup.net, *eager_setup.net, 1e-6, 1e-7);
  for (size_t d = 1; d < devices.size(); ++d)
    expect_parameters_close(*captured_setup.model->replicas()[d], *captured_setup.net, 0.0, 0.0);
  for (int i = 2; i < 20; ++i) EXPECT_TRUE(captured.captured[i]) << "step " << i << ": " << captured.reasons[i];
  EXPECT_FALSE(captured.captured[0]);
  EXPECT_EQ(captured.reasons[0], "warm-up step 1 of 2");
  EXPECT_EQ(step.strategy(), parallel::StepStrategy::Captured);
  EXPECT_EQ(step.graphs(), expected_graphs);
}

// The LR changes every step: a LinearLR ramp for AdamW, a cosine for SGD, one scheduler per replica.
AfterStep schedule_steps(bool cosine) {
  auto schedulers = std::make_shared<std::vector<std::unique_ptr<optim::LRScheduler>>>();
  return [schedulers, cosine](Training& setup, int) {
    if (schedulers->empty()) {
      for (size_t d = 0; d < setup.optimizer->size(); ++d) {
        optim::Optimizer& optimizer = setup.optimizer->optimizer(d);
        if (cosine) {
          schedulers->push_back(std::make_unique<optim::CosineAnnealingLR>(optimizer, 20));
        } else {
          schedulers->push_back(std::make_unique<optim::LinearLR>(optimizer, 0.2, 1.0, 20));
        }
      }
    }
    for (auto& scheduler : *schedulers) scheduler->step();
  };
}

AfterStepMaker with_schedule(bool cosine) {
  return [cosine] { return schedule_steps(cosine); };
}

class TrainingStepOnGpus : public OneAndTwoGpus {};

TEST_P(TrainingStepOnGpus, SgdMomentumEqualsEager) {
  expect_captured_equals_eager(devices(), sgd_momentum, constant_rows, nullptr, 1);
}

TEST_P(TrainingStepOnGpus, AdamWWithLinearScheduleEqualsEagerWithoutRecapture) {
  expect_captured_equals_eager(devices(), adamw, constant_rows, with_schedule(false), 1);
}

TEST_P(TrainingStepOnGpus, SgdWithCosineScheduleEqualsEager) {
  expect_captured_equals_eager(devices(), sgd_momentum, constant_rows, with_schedule(true), 1);
}

TEST_P(TrainingStepOnGpus, ShortLastBatchGetsItsOwnGraph) {
  expect_captured_equals_eager(
      devices(), sgd_momentum, [](int step) { return step % 5 == 4 ? 100 : 256; }, nullptr, 2);
}

TEST_P(TrainingStepOnGpus, AdamStepCountsAdvanceAsEager) {
  Training setup(devices(), adamw);
  parallel::TrainingStep step(*setup.model, *setup.optimizer, nn::mse_loss);
  run(setup, step, 7, constant_rows);
  EXPECT_TRUE(step.captured());
  for (size_t d = 0; d < setup.optimizer->size(); ++d) {
    EXPECT_EQ(dynamic_cast<optim::AdamW&>(setup.optimizer->optimizer(d)).step_count(0), 7);
  }
}

TEST_P(TrainingStepOnGpus, CapturesAgainAfterTheOptimizerStateIsReplaced) {
  Training captured_setup(devices(), sgd_momentum);
  Training eager_setup(devices(), sgd_momentum);
  parallel::TrainingStep step(*captured_setup.model, *captured_setup.optimizer, nn::mse_loss);
  parallel::TrainingStep reference = eager_step(eager_setup);
  const AfterStep reload = [](Training& training, int i) {
    if (i == 5) training.optimizer->load_state_dict(training.optimizer->state_dict());  // new buffer tensors
  };
  const RunResult captured = run(captured_setup, step, 10, constant_rows, reload);
  const RunResult eager = run(eager_setup, reference, 10, constant_rows, reload);
  expect_runs_equal(captured, eager, 1e-6);
  expect_parameters_close(*captured_setup.net, *eager_setup.net, 1e-6, 1e-7);
  EXPECT_TRUE(step.captured());
  EXPECT_EQ(step.graphs(), 1u);
}

TEST_P(TrainingStepOnGpus, ReturnsAFreshLossEachStep) {
  Training setup(devices(), sgd_momentum);
  parallel::TrainingStep step(*setup.model, *setup.optimizer, nn::mse_loss);
  std::vector<Tensor> losses;
  for (int i = 0; i < 5; ++i) {
    const auto [features, targets] = batch_of(i, 256, devices()[0]);
    losses.push_back(step.step({.features = features, .targets = targets}));
  }
  EXPECT_TRUE(step.captured());
  const float third = losses[3].item<float>();
  const auto [features, targets] = batch_of(9, 256, devices()[0]);
  step.step({.features = features, .targets = targets});
  EXPECT_EQ(losses[3].item<float>(), third);
  EXPECT_NE(losses[4].item<float>(), third);
}

// Batches from the host and from the last GPU (not the graph's origin on two GPUs), the loss written into slots of
// one tensor: the same losses and parameters as the eager step.
TEST_P(TrainingStepOnGpus, FedFromAnyDeviceIntoLossSlotsEqualsEager) {
  for (const Device source : {Device::cpu(0), devices().back()}) {
    SCOPED_TRACE(source.str());
    Training captured_setup(devices(), sgd_momentum);
    Training eager_setup(devices(), sgd_momentum);
    parallel::TrainingStep step(*captured_setup.model, *captured_setup.optimizer, nn::mse_loss);
    parallel::TrainingStep reference = eager_step(eager_setup);
    const Tensor losses = Tensor::zeros({8}, devices()[0]);
    std::vector<float> expected;
    for (int i = 0; i < 8; ++i) {
      const auto [features, targets] = batch_of(i, 256, source);
      step.step({.features = features, .targets = targets, .loss_out = losses.narrow(0, i, 1)});
      EXPECT_EQ(step.captured(), i >= 2) << "step " << i << ": " << step.fallback_reason();
      expected.push_back(reference.step({.features = features, .targets = targets}).item<float>());
    }
    const std::vector<float> actual = losses.to_vector();
    for (size_t i = 0; i < expected.size(); ++i) {
      EXPECT_NEAR(actual[i], expected[i], 1e-6 * std::abs(expected[i]) + 1e-7) << "step " << i;
    }
    expect_parameters_close(*captured_setup.net, *eager_setup.net, 1e-6, 1e-7);
  }
}

// Dropout's masks are drawn on the devices (Note [Random draws in captured graphs] in tandem/core/random.h), so the
// step is captured and each replay draws new masks: bitwise the eager steps' losses, parameters and generator state,
// reseeded before every step (run(): the replays take the new seed's key) and, in `continuing`, not (each replay moves
// the replicas' streams on from where the last one left them).
TEST_P(TrainingStepOnGpus, DropoutIsCapturedAndEqualsEagerBitwise) {
  Training captured_setup(devices(), sgd_momentum, 0.25);
  Training eager_setup(devices(), sgd_momentum, 0.25);
  parallel::TrainingStep step(*captured_setup.model, *captured_setup.optimizer, nn::mse_loss);
  parallel::TrainingStep reference = eager_step(eager_setup);
  const RunResult captured = run(captured_setup, step, 6, constant_rows);
  const RunResult eager = run(eager_setup, reference, 6, constant_rows);
  for (int i = 2; i < 6; ++i) EXPECT_TRUE(captured.captured[i]) << "step " << i << ": " << captured.reasons[i];
  EXPECT_EQ(step.strategy(), parallel::StepStrategy::Captured) << step.fallback_reason();
  EXPECT_EQ(step.graphs(), 1u);
  expect_runs_equal(captured, eager, 0.0);
  expect_parameters_close(*captured_setup.net, *eager_setup.net, 0.0, 0.0);

  const auto continuing = [&](parallel::TrainingStep& training) {
    manual_seed(1234);
    std::vector<float> losses;
    for (int i = 6; i < 12; ++i) {
      const auto [features, targets] = batch_of(i, 256, devices()[0]);
      losses.push_back(training.step({.features = features, .targets = targets}).item<float>());
    }
    return std::pair(losses, generator_state());
  };
  auto [captured_losses, captured_state] = continuing(step);
  EXPECT_TRUE(step.captured()) << step.fallback_reason();
  const auto [eager_losses, eager_state] = continuing(reference);
  EXPECT_EQ(captured_losses, eager_losses);
  EXPECT_EQ(captured_state.counter, eager_state.counter);
  EXPECT_EQ(captured_state.device_counters, eager_state.device_counters);
  for (const Device& device : devices()) {
    // batch_of reseeds (seeded_randn), so the counters hold the last step's draws: a mask of [the device's rows, 20].
    EXPECT_EQ(captured_state.device_counters[device], 256u / devices().size() * 20)
        << device << ": the last step draws a mask of [the device's rows, 20] from the device's stream";
  }
  expect_parameters_close(*captured_setup.net, *eager_setup.net, 0.0, 0.0);
}

// A forward that draws on the host (Tensor::randn's noise) cannot be captured: the step falls back, saying why, and
// equals the eager one.
class NoisyNet : public nn::Cloneable<NoisyNet> {
 public:
  explicit NoisyNet(Device device) {
    manual_seed(4321);
    fc = std::make_shared<nn::Linear>(10, 1, true, device);
    register_module("fc", fc);
  }
  Tensor forward(const Tensor& x) override { return fc->forward(x + Tensor::randn(x.shape(), x.device()) * 0.1f); }
  std::shared_ptr<nn::Linear> fc;
};

TEST_P(TrainingStepOnGpus, HostDrawsInForwardFallBackWithTheirReason) {
  const auto train = [&](bool capture) {
    parallel::ReplicatedModule model(std::make_shared<NoisyNet>(devices()[0]), devices());
    parallel::ReplicatedSGD sgd(model, {.lr = 0.05});
    parallel::TrainingStep step(model, sgd, nn::mse_loss, {.capture = capture});
    manual_seed(8);
    std::vector<float> losses;
    for (int i = 0; i < 5; ++i) {
      const auto [features, targets] = batch_of(i, 64, devices()[0]);
      losses.push_back(step.step({.features = features, .targets = targets}).item<float>());
    }
    EXPECT_FALSE(step.captured());
    return std::pair(losses, step.fallback_reason());
  };
  const auto [losses, reason] = train(true);
  EXPECT_NE(reason.find("the capture of the step failed, so it runs eagerly"), std::string::npos) << reason;
  EXPECT_NE(reason.find("Tensor::randn: draws its values on the host"), std::string::npos) << reason;
  EXPECT_EQ(losses, train(false).first);
}

TEST_P(TrainingStepOnGpus, MoreShapesThanMaxGraphsRunEagerly) {
  Training captured_setup(devices(), sgd_momentum);
  Training eager_setup(devices(), sgd_momentum);
  parallel::TrainingStep step(*captured_setup.model, *captured_setup.optimizer, nn::mse_loss, {.max_graphs = 1});
  parallel::TrainingStep reference = eager_step(eager_setup);
  const auto rows_of = [](int i) { return i % 2 == 0 ? 256 : 128; };
  const RunResult captured = run(captured_setup, step, 8, rows_of);
  const RunResult eager = run(eager_setup, reference, 8, rows_of);
  expect_runs_equal(captured, eager, 1e-6);
  expect_parameters_close(*captured_setup.net, *eager_setup.net, 1e-6, 1e-7);
  EXPECT_EQ(step.graphs(), 1u);
  EXPECT_TRUE(captured.captured[6]);
  EXPECT_FALSE(captured.captured[7]);
  EXPECT_EQ(captured.reasons[7],
            "1 graphs are held already (TrainingStepOptions::max_graphs is 1), so the batch of shape [128, 10] runs "
            "eagerly");
}

TANDEM_INSTANTIATE_ON_ONE_AND_TWO_GPUS(TrainingStepOnGpus);

}  // namespace
}  // namespace tandem::testing
