// TrainerOptions::capture: the Trainer's steps through a parallel::TrainingStep. CPU devices never capture (the steps
// are bit-identical with capture on or off, and the reason says why); on GPUs the captured fit equals the eager one
// to float rounding, a model with Dropout's included.

#include <cmath>
#include <string>
#include <vector>

#include "support/one_and_two_gpus.h"
#include "support/test_support.h"

namespace tandem::trainers {
namespace {

using testing::diabetes;

struct FitRun {
  FitResult result;
  std::vector<std::vector<float>> parameters;
  size_t graphs = 0;
  size_t captures = 0;
};

// Fits `make()` (initialized with seed 0) on `devices` for `epochs` with capture on or off.
FitRun fit(const std::function<std::shared_ptr<nn::Module>()>& make, const std::vector<Device>& devices, bool capture,
           int64_t epochs, TrainerOptions options = {}) {
  manual_seed(0);
  options.devices = devices;
  options.epochs = epochs;
  options.capture = capture;
  Trainer trainer(make(), options);
  FitRun run{.result = trainer.fit(diabetes().train, diabetes().test)};
  for (const Tensor& parameter : trainer.model()->parameters()) run.parameters.push_back(parameter.to_vector());
  run.graphs = trainer.training_step().graphs();
  run.captures = trainer.training_step().captures();
  return run;
}

std::shared_ptr<nn::Module> seed_net() { return make_mlp(10, 20); }
std::shared_ptr<nn::Module> dropout_net() { return make_mlp(10, {20}, 1, Activation::ReLU, 0.2); }

TEST(TrainerCapture, IsOnByDefault) {
  EXPECT_TRUE(TrainerOptions{}.capture);
  Trainer trainer(seed_net(), {.devices = {Device::cpu(0)}});
  EXPECT_TRUE(trainer.options().capture);
}

TEST(TrainerCapture, CpuStepsAreBitIdenticalWithCaptureOnOrOff) {
  const std::vector<Device> devices = {Device::cpu(0), Device::cpu(1)};
  const FitRun on = fit(seed_net, devices, true, 5);
  const FitRun off = fit(seed_net, devices, false, 5);
  EXPECT_EQ(on.parameters, off.parameters);
  EXPECT_EQ(on.result.train.mse, off.result.train.mse);
  EXPECT_EQ(on.result.test->mse, off.result.test->mse);
  EXPECT_EQ(on.result.steps, 30);
  EXPECT_EQ(on.result.captured_steps, 0);
  EXPECT_EQ(off.result.captured_steps, 0);
  EXPECT_FALSE(on.result.steps_captured());
  EXPECT_EQ(on.result.eager_reason, "capture needs CUDA devices, but the model runs on cpu:0");
  EXPECT_EQ(off.result.eager_reason, "capture is off (TrainerOptions::capture is false)");
  EXPECT_EQ(on.captures, 0u);
}

TEST(TrainerCapture, AFitWithoutStepsSaysSo) {
  manual_seed(0);
  Trainer trainer(seed_net(), {.devices = {Device::cpu(0)}, .epochs = 1});
  EXPECT_EQ(trainer.fit(diabetes().train).eager_reason, "capture needs CUDA devices, but the model runs on cpu:0");
  const FitResult again = trainer.fit(diabetes().train);  // at the last epoch already
  EXPECT_EQ(again.steps, 6);
  EXPECT_EQ(again.captured_steps, 0);
  EXPECT_EQ(again.eager_reason, "this fit ran no training steps");
}

// ---- CUDA ------------------------------------------------------------------------------------------------------

class TrainerCaptureOnGpus : public testing::OneAndTwoGpus {};

void expect_near_relative(double actual, double expected, double rtol, const char* what) {
  EXPECT_NEAR(actual, expected, rtol * std::abs(expected)) << what;
}

void expect_same_metrics(const FitResult& actual, const FitResult& expected) {
  expect_near_relative(actual.train.mse, expected.train.mse, 1e-5, "train mse");
  expect_near_relative(actual.train.r2, expected.train.r2, 1e-5, "train r2");
  expect_near_relative(actual.test->mse, expected.test->mse, 1e-5, "test mse");
  expect_near_relative(actual.test->r2, expected.test->r2, 1e-5, "test r2");
  EXPECT_EQ(actual.steps, expected.steps);
}

// The diabetes training set (354 rows) in batches of 64: five full batches and one of 34 per epoch, so two graphs,
// captured once each although every epoch evaluates in eval mode; every step after the two warm-up steps replays.
TEST_P(TrainerCaptureOnGpus, CapturedFitEqualsEagerFit) {
  const FitRun captured = fit(seed_net, devices(), true, 20);
  const FitRun eager = fit(seed_net, devices(), false, 20);
  expect_same_metrics(captured.result, eager.result);
  EXPECT_TRUE(captured.result.steps_captured()) << captured.result.eager_reason;
  EXPECT_EQ(captured.result.eager_reason, "");
  EXPECT_EQ(captured.result.captured_steps, 120 - 2);
  EXPECT_EQ(captured.graphs, 2u);
  EXPECT_EQ(captured.captures, 2u);
  EXPECT_EQ(eager.result.captured_steps, 0);
  EXPECT_EQ(eager.result.eager_reason, "capture is off (TrainerOptions::capture is false)");
}

// AdamW under a cosine schedule: the learning rate changes every epoch without a new capture.
TEST_P(TrainerCaptureOnGpus, ScheduledAdamWEqualsEagerWithoutRecapture) {
  TrainerOptions options;
  options.optimizer =
      CustomOptimizer{"adamw", [](std::vector<Tensor> parameters) {
                        return std::make_unique<optim::AdamW>(std::move(parameters), optim::AdamWOptions{.lr = 0.01});
                      }};
  options.lr_schedule = parse_lr_schedule("cosine", 10);
  const FitRun captured = fit(seed_net, devices(), true, 10, options);
  const FitRun eager = fit(seed_net, devices(), false, 10, options);
  expect_same_metrics(captured.result, eager.result);
  EXPECT_TRUE(captured.result.steps_captured()) << captured.result.eager_reason;
  EXPECT_EQ(captured.captures, 2u);
}

// Dropout's masks are drawn on the GPUs, so its steps are captured too and replay new masks each step: the fit
// equals the eager one, and the generator ends where the eager fit's does.
TEST_P(TrainerCaptureOnGpus, DropoutFitIsCapturedAndEqualsEager) {
  const FitRun captured = fit(dropout_net, devices(), true, 5);
  const GeneratorState captured_state = generator_state();
  const FitRun eager = fit(dropout_net, devices(), false, 5);
  expect_same_metrics(captured.result, eager.result);
  EXPECT_TRUE(captured.result.steps_captured()) << captured.result.eager_reason;
  EXPECT_EQ(captured.result.eager_reason, "");
  EXPECT_EQ(captured.result.captured_steps, 30 - 2);
  EXPECT_EQ(captured.graphs, 2u);
  const GeneratorState eager_state = generator_state();
  EXPECT_EQ(captured_state.counter, eager_state.counter);
  EXPECT_EQ(captured_state.device_counters, eager_state.device_counters);
}

TANDEM_INSTANTIATE_ON_ONE_AND_TWO_GPUS(TrainerCaptureOnGpus);

}  // namespace
}  // namespace tandem::trainers
