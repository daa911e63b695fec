// Optimizer steps in backward (parallel::StepsInBackward, Note [Optimizer steps in backward]): each bucket's
// parameters updated as soon as its sum has started give bitwise the parameters and state of the plain step, eager
// on every device set and captured on 1 and 2 GPUs; the reducer's per-bucket callback; the errors.

#include "tandem/parallel/steps_in_backward.h"

#include <cmath>
#include <functional>
#include <memory>
#include <mutex>
#include <set>

#include "parallel/parallel_test_helpers.h"
#include "support/velocity_optimizer.h"
#include "tandem/parallel/captured_step.h"

namespace tandem::testing {
namespace {

using OptimizerFactory =
    std::function<std::unique_ptr<parallel::ReplicatedOptimizer>(parallel::ReplicatedModule& model)>;

std::unique_ptr<parallel::ReplicatedOptimizer> sgd_momentum(parallel::ReplicatedModule& model) {
  return std::make_unique<parallel::ReplicatedSGD>(
      model, optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01});
}

std::unique_ptr<parallel::ReplicatedOptimizer> adam_amsgrad(parallel::ReplicatedModule& model) {
  return std::make_unique<parallel::ReplicatedAdam>(model, optim::AdamOptions{.lr = 0.01, .amsgrad = true});
}

std::unique_ptr<parallel::ReplicatedOptimizer> adamw(parallel::ReplicatedModule& model) {
  return std::make_unique<parallel::ReplicatedAdamW>(model, optim::AdamWOptions{.lr = 0.01, .weight_decay = 0.05});
}

// A net of two linear layers replicated over `devices` with small buckets (fc2's bias, fc2's weight, fc1's bias,
// fc1's weight: one bucket each, each summed as soon as backward has produced it), and an optimizer over it.
struct Training {
  Training(const std::vector<Device>& devices, const OptimizerFactory& make_optimizer, bool in_backward)
      : net(make_net(devices[0], 4, 16, 3)),
        model(
            std::make_unique<parallel::ReplicatedModule>(net, devices, parallel::ReplicatedOptions{.bucket_size = 64})),
        optimizer(make_optimizer(*model)) {
    optimizer->set_steps_in_backward(in_backward);
  }
  std::shared_ptr<TwoLayerNet> net;
  std::unique_ptr<parallel::ReplicatedModule> model;
  std::unique_ptr<parallel::ReplicatedOptimizer> optimizer;
};

std::pair<Tensor, Tensor> batch_of(int step, Device device) {
  return {seeded_randn({24, 4}, device, 300 + step), seeded_randn({24, 3}, device, 700 + step)};
}

// Every replica's parameters and the master optimizer's state, bitwise.
void expect_same_training(const Training& actual, const Training& expected) {
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

// Five eager steps (data_parallel_step) with and without steps in backward, the LR changed after each.
void expect_eager_steps_equal(const std::vector<Device>& devices, const OptimizerFactory& make_optimizer) {
  Training overlapped(devices, make_optimizer, true);
  Training plain(devices, make_optimizer, false);
  EXPECT_FALSE(plain.optimizer->steps_in_backward());
  for (int step = 0; step < 5; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const auto [features, targets] = batch_of(step, devices[0]);
    for (Training* run : {&overlapped, &plain}) {
      const Tensor loss = parallel::data_parallel_step(*run->model, *run->optimizer, features, targets);
      EXPECT_TRUE(std::isfinite(loss.item<float>()));
      for (size_t d = 0; d < run->optimizer->size(); ++d) run->optimizer->optimizer(d).set_lr(0.05 / (2.0 + step));
    }
    expect_same_training(overlapped, plain);
  }
}

class StepsInBackwardTest : public EveryDeviceSet {};

TEST_P(StepsInBackwardTest, SgdEqualsThePlainStepBitwise) {
  Training probe(devices(), sgd_momentum, true);
  // A mix of CPU and CUDA devices sums on the compute streams: it takes the plain step.
  EXPECT_EQ(probe.optimizer->steps_in_backward(), GetParam() != DeviceSet::Mixed);
  EXPECT_EQ(probe.model->bucket_count(), 4u);
  expect_eager_steps_equal(devices(), sgd_momentum);
}

TEST_P(StepsInBackwardTest, AdamEqualsThePlainStepBitwise) { expect_eager_steps_equal(devices(), adam_amsgrad); }

TEST_P(StepsInBackwardTest, AdamWEqualsThePlainStepBitwise) { expect_eager_steps_equal(devices(), adamw); }

TANDEM_INSTANTIATE_ON_EVERY_DEVICE_SET(StepsInBackwardTest);

// On CPU devices a bucket's update runs inside the callback: from the second step on (the first creates the
// optimizer's state, on the compute stream, so finish() takes it), every parameter is updated before finish().
TEST(StepsInBackward, BucketsAreUpdatedDuringBackwardOnceTheStateExists) {
  const std::vector<Device> devices = {Device::cpu(0), Device::cpu(1)};
  Training run(devices, sgd_momentum, true);
  for (int step = 0; step < 2; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const auto [features, targets] = batch_of(step, devices[0]);
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
  sgd.set_steps_in_backward(false);
  EXPECT_ERROR(parallel::StepsInBackward(sgd, parallel::StepForm::Eager),
               "parallel::StepsInBackward: the optimizer does not step in backward");
  EXPECT_ERROR(model.forward_backward(
                   {Tensor::zeros({2, 4})}, [](size_t, const Tensor& y) { return sum(y); }, false,
                   parallel::ReplicaThreads::Workers, {}, [](size_t) {}),
               "parallel::ReplicatedModule::forward_backward: got a bucket callback with reduce false");
  parallel::ReplicatedModule other(make_net(devices[0]), devices);
  EXPECT_ERROR(parallel::data_parallel_step(other, sgd, Tensor::zeros({4, 4}), Tensor::zeros({4, 2})),
               "train_step: the optimizer was built over another ReplicatedModule than the model it steps");
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

// Eight steps through a CapturedStep each (two eager warm-ups, then replays), one with steps in backward and one
// without: the same parameters and state, bitwise, and every step after the warm-up replayed.
void expect_captured_steps_equal(const std::vector<Device>& devices, const OptimizerFactory& make_optimizer) {
  Training overlapped(devices, make_optimizer, true);
  Training plain(devices, make_optimizer, false);
  parallel::CapturedStep overlapped_step(*overlapped.model, *overlapped.optimizer, nn::mse_loss);
  parallel::CapturedStep plain_step(*plain.model, *plain.optimizer, nn::mse_loss);
  for (int step = 0; step < 8; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const auto [features, targets] = batch_of(step, devices[0]);
    const float a = overlapped_step.step(features, targets).item<float>();
    const float b = plain_step.step(features, targets).item<float>();
    EXPECT_EQ(a, b);
    EXPECT_EQ(overlapped_step.captured(), step >= 2) << overlapped_step.fallback_reason();
    for (Training* run : {&overlapped, &plain}) {
      for (size_t d = 0; d < run->optimizer->size(); ++d) run->optimizer->optimizer(d).set_lr(0.05 / (2.0 + step));
    }
    expect_same_training(overlapped, plain);
  }
}

TEST_P(StepsInBackwardOnGpus, EagerSgdEqualsThePlainStepBitwise) { expect_eager_steps_equal(devices(), sgd_momentum); }
TEST_P(StepsInBackwardOnGpus, CapturedSgdEqualsThePlainStepBitwise) {
  expect_captured_steps_equal(devices(), sgd_momentum);
}
TEST_P(StepsInBackwardOnGpus, CapturedAdamWEqualsThePlainStepBitwise) { expect_captured_steps_equal(devices(), adamw); }

INSTANTIATE_TEST_SUITE_P(Gpus, StepsInBackwardOnGpus, ::testing::Values(1, 2),
                         [](const ::testing::TestParamInfo<int>& info) {
                           return info.param == 1 ? std::string("CUDA") : std::string("MultiCUDA");
                         });

}  // namespace
}  // namespace tandem::testing
