// Optimizer steps in backward (parallel::StepsInBackward, Note [Optimizer steps in backward]): a TrainingStep that
// updates each bucket's parameters as soon as its sum has started gives bitwise the parameters and state of one that
// steps after backward (TrainingStepOptions::steps_in_backward false), eager on every device set and captured on 1
// and 2 GPUs; the reducer's per-bucket callback; the errors.

#include "steps_in_backward.h"

#include <cmath>
#include <functional>
#include <memory>
#include <mutex>
#include <set>

#include "parallel/parallel_test_helpers.h"
#include "support/velocity_optimizer.h"
#include "tandem/parallel/training_step.h"

namespace tandem::testing {
namespace {

using OptimizerMaker = std::function<std::unique_ptr<parallel::ReplicatedOptimizer>(parallel::ReplicatedModule& model)>;

std::unique_ptr<parallel::ReplicatedOptimizer> decayed_sgd(parallel::ReplicatedModule& model) {
  return std::make_unique<parallel::ReplicatedSGD>(
      model, optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01});
}

std::unique_ptr<parallel::ReplicatedOptimizer> amsgrad_adam(parallel::ReplicatedModule& model) {
  return std::make_unique<parallel::ReplicatedAdam>(model, optim::AdamOptions{.lr = 0.01, .amsgrad = true});
}

std::unique_ptr<parallel::ReplicatedOptimizer> decayed_adamw(parallel::ReplicatedModule& model) {
  return std::make_unique<parallel::ReplicatedAdamW>(model, optim::AdamWOptions{.lr = 0.01, .weight_decay = 0.05});
}

// A net of two linear layers replicated over `devices` with small buckets (fc2's bias, fc2's weight, fc1's bias,
// fc1's weight: one bucket each, each summed as soon as backward has produced it), an optimizer over it, and a
// TrainingStep (captured where `capture`) that steps in backward where `in_backward` and the optimizer allows.
struct BucketedTraining {
  BucketedTraining(const std::vector<Device>& devices, const OptimizerMaker& make_optimizer, bool in_backward,
                   bool capture = false)
      : net(make_net(devices[0], 4, 16, 3)),
        model(
            std::make_unique<parallel::ReplicatedModule>(net, devices, parallel::ReplicatedOptions{.bucket_size = 64})),
        optimizer(make_optimizer(*model)),
        step(std::make_unique<parallel::TrainingStep>(
            *model, *optimizer, nn::mse_loss,
            parallel::TrainingStepOptions{.capture = capture, .steps_in_backward = in_backward})) {}
  std::shared_ptr<TwoLayerNet> net;
  std::unique_ptr<parallel::ReplicatedModule> model;
  std::unique_ptr<parallel::ReplicatedOptimizer> optimizer;
  std::unique_ptr<parallel::TrainingStep> step;
};

std::pair<Tensor, Tensor> bucketed_batch_of(int step, Device device) {
  return {seeded_randn({24, 4}, device, 300 + step), seeded_randn({24, 3}, device, 700 + step)};
}

// Every replica's parameters and the master optimizer's state, bitwise.
void expect_same_training(const BucketedTraining& actual, const BucketedTraining& expected) {
  for (size_t d = 0; d < actual.model->size(); ++d) {
    SCOPED_TRACE("replica " + std::to_string(d));
    expect_parameters_close(*actual.model->replicas()[d], *expected.model->replicas()[d], 0.0, 0.0);
  }
  const optim::OptimizerState a = actual.optimizer->state_dict();
  const optim::OptimizerState b = expected.optimizer->state_dict();
  ASSERT_EQ(a.parameters.size(), b.parameters.size());
  for (size_t i = 0; i < a.parameters.size(); ++i) {
    EXPECT_EQ(a.parameters[i].step, b.parameters[i].step) << "parameter " << i;
    ASSERT_EQ(a.parameters[i].tensors.size(), b.parameters[i].tensors.size()) << "parameter " << i;
    for (size_t t = 0; t < a.parameters[i].tensors.size(); ++t)
      expect_close(a.parameters[i].tensors[t].second, b.parameters[i].tensors[t].second, 0.0, 0.0);
  }
}

// Five eager steps with and without steps in backward, the LR changed after each.
void expect_eager_steps_equal(const std::vector<Device>& devices, const OptimizerMaker& make_optimizer) {
  BucketedTraining overlapped(devices, make_optimizer, true);
  BucketedTraining plain(devices, make_optimizer, false);
  const parallel::StepStrategy overlapped_strategy = overlapped.optimizer->steps_in_backward()
                                                         ? parallel::StepStrategy::StepsInBackward
                                                         : parallel::StepStrategy::Eager;
  for (int step = 0; step < 5; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const auto [features, targets] = bucketed_batch_of(step, devices[0]);
    for (BucketedTraining* run : {&overlapped, &plain}) {
      const Tensor loss = run->step->step({.features = features, .targets = targets});
      EXPECT_TRUE(std::isfinite(loss.item<float>()));
      for (size_t d = 0; d < run->optimizer->size(); ++d) run->optimizer->optimizer(d).set_lr(0.05 / (2.0 + step));
    }
    EXPECT_EQ(overlapped.step->strategy(), overlapped_strategy);
    EXPECT_EQ(plain.step->strategy(), parallel::StepStrategy::Eager);
    expect_same_training(overlapped, plain);
  }
}

class StepsInBackwardTest : public EveryDeviceSet {};

TEST_P(StepsInBackwardTest, SgdEqualsThePlainStepBitwise) {
  BucketedTraining probe(devices(), decayed_sgd, true);
  // A mix of CPU and CUDA devices sums on the compute streams: it takes the plain step.
  EXPECT_EQ(probe.optimizer->steps_in_backward(), GetParam() != DeviceSet::Mixed);
  EXPECT_EQ(probe.model->bucket_count(), 4u);
  expect_eager_steps_equal(devices(), decayed_sgd);
}

TEST_P(StepsInBackwardTest, AdamEqualsThePlainStepBitwise) { expect_eager_steps_equal(devices(), amsgrad_adam); }

TEST_P(StepsInBackwardTest, AdamWEqualsThePlainStepBitwise) { expect_eager_steps_equal(devices(), decayed_adamw); }

TANDEM_INSTANTIATE_ON_EVERY_DEVICE_SET(StepsInBackwardTest);

// On CPU devices a bucket's update runs inside the callback: from the second step on (the first creates the
// optimizer's state, on the compute stream, so finish() takes it), every parameter is updated before finish().
TEST(StepsInBackward, BucketsAreUpdatedDuringBackwardOnceTheStateExists) {
  const std::vector<Device> devices = {Device::cpu(0), Device::cpu(1)};
  BucketedTraining run(devices, decayed_sgd, true);
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const auto [features, targets] = bucketed_batch_of(step, devices[0]);
    std::vector<Tensor> before;
    for (const Tensor& parameter : run.net->parameters()) before.push_back(parameter.clone());
    std::set<size_t> started;
    parallel::StepsInBackward steps(*run.optimizer, parallel::StepForm::Eager);
    const std::vector<Tensor> labels = comm::scatter(targets, devices);
    run.model->zero_grad();
    run.model->forward_backward(
        comm::scatter(features, devices),
        [&](size_t i, const Tensor& output) { return nn::mse_loss(output, labels[i]); }, true,
        parallel::ReplicaThreads::Workers, {},
        [&](size_t bucket) {
          started.insert(bucket);
          steps.bucket_started(bucket);
        });
    EXPECT_EQ(started, (std::set<size_t>{0, 1, 2, 3}));
    const std::vector<Tensor> after_backward = run.net->parameters();
    for (size_t i = 0; i < before.size(); ++i) {
      const bool changed = max(abs(after_backward[i] - before[i])).item<float>() > 0.0f;
      EXPECT_EQ(changed, step > 0) << "parameter " << i;
    }
    steps.finish();
    for (size_t i = 0; i < before.size(); ++i)
      EXPECT_GT(max(abs(run.net->parameters()[i] - before[i])).item<float>(), 0.0f) << "parameter " << i;
    EXPECT_ERROR(steps.finish(), "parallel::StepsInBackward::finish: the step is finished already");
    EXPECT_ERROR(steps.bucket_started(0), "parallel::StepsInBackward::bucket_started: bucket 0 after finish()");
  }
}

TEST(StepsInBackward, RejectsOptimizersThatCannotAndBadBuckets) {
  const std::vector<Device> devices = {Device::cpu(0), Device::cpu(1)};
  auto net = make_net(devices[0]);
  parallel::ReplicatedModule model(net, devices, {.bucket_size = 64});
  parallel::ReplicatedOptimizer velocity(model, [](std::vector<Tensor> parameters) {
    return std::make_unique<VelocityOptimizer>(std::move(parameters), 0.1f, 0.5f);
  });
  EXPECT_FALSE(velocity.steps_in_backward());
  EXPECT_ERROR(parallel::StepsInBackward(velocity, parallel::StepForm::Eager),
               "parallel::StepsInBackward: the optimizer does not step in backward");
  parallel::ReplicatedSGD sgd(model, {.lr = 0.1});
  parallel::StepsInBackward steps(sgd, parallel::StepForm::Eager);
  EXPECT_ERROR(steps.bucket_started(9), "parallel::StepsInBackward::bucket_started: bucket 9 but the layout has ");
  steps.bucket_started(1);
  EXPECT_ERROR(steps.bucket_started(1),
               "parallel::StepsInBackward::bucket_started: bucket 1 came twice but expected each bucket once per step");
  EXPECT_ERROR(model.forward_backward(
                   {Tensor::zeros({2, 4})}, [](size_t, const Tensor& y) { return sum(y); }, false,
                   parallel::ReplicaThreads::Workers, {}, [](size_t) {}),
               "parallel::ReplicatedModule::forward_backward: got a bucket callback with reduce false");
}

// The reducer calls begin()'s callback once per bucket started during backward, and not at all when the step does
// not overlap (one bucket).
TEST(StepsInBackward, TheReducerReportsEachStartedBucketOnce) {
  const std::vector<Device> devices = {Device::cpu(0), Device::cpu(1), Device::cpu(2)};
  for (const size_t bucket_size : {size_t{64}, size_t{1} << 20}) {
    SCOPED_TRACE("bucket_size " + std::to_string(bucket_size));
    parallel::ReplicatedModule model(make_net(devices[0], 4, 16, 3), devices, {.bucket_size = bucket_size});
    std::vector<Tensor> inputs;
    for (size_t d = 0; d < devices.size(); ++d) inputs.push_back(seeded_randn({2, 4}, devices[d], d));
    std::mutex mutex;
    std::multiset<size_t> started;
    model.forward_backward(
        inputs, [](size_t, const Tensor& y) { return sum(y); }, true, parallel::ReplicaThreads::Workers, {},
        [&](size_t bucket) {
          std::lock_guard<std::mutex> lock(mutex);
          started.insert(bucket);
        });
    EXPECT_EQ(started, bucket_size == 64 ? (std::multiset<size_t>{0, 1, 2, 3}) : std::multiset<size_t>{});
  }
}

// ---- CUDA: captured steps against plain ones -----------------------------------------------------------------

class StepsInBackwardOnGpus : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override { TANDEM_REQUIRE_GPUS(GetParam()); }
  std::vector<Device> devices() const {
    std::vector<Device> devices;
    for (int d = 0; d < GetParam(); ++d) devices.push_back(Device::cuda(d));
    return devices;
  }
};

// Eight steps through a captured TrainingStep each (two eager warm-ups, then replays), one with steps in backward and
// one without: the same parameters and state, bitwise, and every step after the warm-up replayed.
void expect_captured_steps_equal(const std::vector<Device>& devices, const OptimizerMaker& make_optimizer) {
  BucketedTraining overlapped(devices, make_optimizer, true, /*capture=*/true);
  BucketedTraining plain(devices, make_optimizer, false, /*capture=*/true);
  parallel::TrainingStep& overlapped_step = *overlapped.step;
  parallel::TrainingStep& plain_step = *plain.step;
  for (int step = 0; step < 8; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const auto [features, targets] = bucketed_batch_of(step, devices[0]);
    const float a = overlapped_step.step({.features = features, .targets = targets}).item<float>();
    const float b = plain_step.step({.features = features, .targets = targets}).item<float>();
    EXPECT_EQ(a, b);
    EXPECT_EQ(overlapped_step.captured(), step >= 2) << overlapped_step.fallback_reason();
    EXPECT_EQ(plain_step.captured(), step >= 2) << plain_step.fallback_reason();
    for (BucketedTraining* run : {&overlapped, &plain}) {
      for (size_t d = 0; d < run->optimizer->size(); ++d) run->optimizer->optimizer(d).set_lr(0.05 / (2.0 + step));
    }
    expect_same_training(overlapped, plain);
  }
}

TEST_P(StepsInBackwardOnGpus, EagerSgdEqualsThePlainStepBitwise) { expect_eager_steps_equal(devices(), decayed_sgd); }
TEST_P(StepsInBackwardOnGpus, CapturedSgdEqualsThePlainStepBitwise) {
  expect_captured_steps_equal(devices(), decayed_sgd);
}
TEST_P(StepsInBackwardOnGpus, CapturedAdamWEqualsThePlainStepBitwise) {
  expect_captured_steps_equal(devices(), decayed_adamw);
}

INSTANTIATE_TEST_SUITE_P(Gpus, StepsInBackwardOnGpus, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return info.param == 1 ? std::string("CUDA") : std::string("MultiCUDA");
                         });

}  // namespace
}  // namespace tandem::testing
