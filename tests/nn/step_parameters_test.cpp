// optim::Optimizer::step_parameters and replayable_step_parameters: a step over the parts of a partition of the
// parameters equals one step(), bitwise, for SGD, Adam and AdamW (Note [Stepping parameters apart]); and their errors.
#include <functional>
#include <memory>
#include <string>

#include "support/test_support.h"
#include "support/velocity_optimizer.h"

namespace tandem {
namespace {

using testing::expect_close;

// Four parameters of different shapes, the same values for the same seed.
std::vector<Tensor> make_parameters(Device device) {
  manual_seed(21);
  std::vector<Tensor> parameters;
  for (const Shape& shape : {Shape{3, 2}, Shape{3}, Shape{2, 5}, Shape{4}})
    parameters.push_back(Tensor::randn(shape, device).set_requires_grad(true));
  return parameters;
}

// Gives every parameter but the one at `without` (none when out of range) a gradient that depends on `step`.
void set_gradients(const std::vector<Tensor>& parameters, int step, size_t without = 99) {
  manual_seed(500 + step);
  for (size_t i = 0; i < parameters.size(); ++i) {
    const Tensor grad = Tensor::randn(parameters[i].shape(), parameters[i].device());
    parameters[i].set_grad(i == without ? Tensor() : grad);
  }
}

void expect_equal_tensors(const std::vector<Tensor>& actual, const std::vector<Tensor>& expected) {
  ASSERT_EQ(actual.size(), expected.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    SCOPED_TRACE("parameter " + std::to_string(i));
    expect_close(actual[i], expected[i], 0.0, 0.0);
  }
}

using MakeOptimizer = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor>)>;

// Five steps of `whole` with step() against five of `parts` with step_parameters({2, 0}) then ({3, 1}) (the first
// step with step(), so that the parts create no state when `replayed`; otherwise the parts create it), a parameter
// without gradient in step 3, the LR changed every step: the parameters stay bitwise equal, and so does the state.
void expect_parts_equal_step(const MakeOptimizer& make, bool replayed) {
  const std::vector<Tensor> whole_parameters = make_parameters(Device::cpu(0));
  const std::vector<Tensor> part_parameters = make_parameters(Device::cpu(0));
  std::unique_ptr<optim::Optimizer> whole = make(whole_parameters);
  std::unique_ptr<optim::Optimizer> parts = make(part_parameters);
  ASSERT_TRUE(parts->steps_parameters_apart());
  for (int step = 0; step < 5; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    set_gradients(whole_parameters, step, step == 3 ? 1 : 99);
    set_gradients(part_parameters, step, step == 3 ? 1 : 99);
    whole->set_lr(0.05 / (1.0 + step));
    parts->set_lr(0.05 / (1.0 + step));
    whole->step();
    if (replayed && step == 0) {
      parts->step();
    } else if (replayed) {
      parts->prepare_replay();
      parts->replayable_step_parameters({2, 0});
      parts->replayable_step_parameters({3, 1});
      parts->finish_replay();
    } else {
      EXPECT_EQ(parts->creates_state({2, 0}), step == 0);
      parts->step_parameters({2, 0});
      EXPECT_FALSE(parts->creates_state({2, 0}));
      parts->step_parameters({3, 1});
    }
    expect_equal_tensors(part_parameters, whole_parameters);
  }
  const optim::OptimizerState a = whole->state_dict();
  const optim::OptimizerState b = parts->state_dict();
  ASSERT_EQ(a.parameters.size(), b.parameters.size());
  for (size_t i = 0; i < a.parameters.size(); ++i) {
    EXPECT_EQ(b.parameters[i].step, a.parameters[i].step) << "parameter " << i;
    ASSERT_EQ(b.parameters[i].tensors.size(), a.parameters[i].tensors.size()) << "parameter " << i;
    for (size_t t = 0; t < a.parameters[i].tensors.size(); ++t)
      expect_close(b.parameters[i].tensors[t].second, a.parameters[i].tensors[t].second, 0.0, 0.0);
  }
}

std::unique_ptr<optim::Optimizer> sgd(std::vector<Tensor> parameters) {
  return std::make_unique<optim::SGD>(std::move(parameters),
                                      optim::SGDOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 0.01});
}

std::unique_ptr<optim::Optimizer> nesterov(std::vector<Tensor> parameters) {
  return std::make_unique<optim::SGD>(std::move(parameters),
                                      optim::SGDOptions{.lr = 0.05, .momentum = 0.8, .nesterov = true});
}

std::unique_ptr<optim::Optimizer> adam_amsgrad(std::vector<Tensor> parameters) {
  return std::make_unique<optim::Adam>(std::move(parameters),
                                       optim::AdamOptions{.lr = 0.05, .weight_decay = 0.1, .amsgrad = true});
}

std::unique_ptr<optim::Optimizer> adamw(std::vector<Tensor> parameters) {
  return std::make_unique<optim::AdamW>(std::move(parameters), optim::AdamWOptions{.lr = 0.05, .weight_decay = 0.1});
}

TEST(StepParameters, SgdPartsEqualOneStep) { expect_parts_equal_step(sgd, /*replayed=*/false); }
TEST(StepParameters, NesterovPartsEqualOneStep) { expect_parts_equal_step(nesterov, /*replayed=*/false); }
TEST(StepParameters, AdamPartsEqualOneStep) { expect_parts_equal_step(adam_amsgrad, /*replayed=*/false); }
TEST(StepParameters, AdamWPartsEqualOneStep) { expect_parts_equal_step(adamw, /*replayed=*/false); }
TEST(StepParameters, ReplayedSgdPartsEqualOneStep) { expect_parts_equal_step(sgd, /*replayed=*/true); }
TEST(StepParameters, ReplayedAdamWPartsEqualOneStep) { expect_parts_equal_step(adamw, /*replayed=*/true); }

TEST(StepParameters, CreatesStateOnlyWhereAGradientMeetsNoState) {
  const std::vector<Tensor> parameters = make_parameters(Device::cpu(0));
  optim::SGD plain(parameters, {.lr = 0.1});  // no momentum: never any state
  set_gradients(parameters, 0);
  EXPECT_FALSE(plain.creates_state({0, 1, 2, 3}));
  optim::Adam adam(parameters);
  set_gradients(parameters, 0, /*without=*/2);
  EXPECT_TRUE(adam.creates_state({0}));
  EXPECT_FALSE(adam.creates_state({2}));  // no gradient, nothing to create
  EXPECT_FALSE(adam.creates_state({}));
  adam.step_parameters({0});
  EXPECT_FALSE(adam.creates_state({0}));
  EXPECT_EQ(adam.step_count(0), 1);
  EXPECT_EQ(adam.step_count(1), 0);
}

TEST(StepParameters, RejectsBadIndicesAndStateCreatedOnTheCommunicationStream) {
  const std::vector<Tensor> parameters = make_parameters(Device::cpu(0));
  set_gradients(parameters, 0);
  optim::SGD sgd(parameters, {.lr = 0.1, .momentum = 0.9});
  EXPECT_ERROR(sgd.step_parameters({0, 4}),
               "optim::SGD::step_parameters: got parameter index 4 but there are 4 parameters");
  EXPECT_ERROR(sgd.step_parameters({1, 0, 1}),
               "optim::SGD::step_parameters: parameter index 1 is listed twice but expected each parameter at most "
               "once");
  EXPECT_ERROR(sgd.creates_state({7}), "optim::SGD::creates_state: got parameter index 7");
  EXPECT_ERROR(sgd.step_parameters({0}, UpdateStream::Communication),
               "optim::SGD::step: parameter 0 has no momentum buffer yet, which is created on the compute stream");
  optim::AdamW adamw(parameters);
  EXPECT_ERROR(adamw.step_parameters({3}, UpdateStream::Communication),
               "optim::AdamW::step: parameter 3 has no moments yet, which are created on the compute stream");
  EXPECT_EQ(adamw.step_count(3), 0);  // refused before anything changed
  adamw.prepare_replay();
  EXPECT_ERROR(adamw.replayable_step_parameters({1}), "optim::AdamW::replayable_step: parameter 1 has no moments yet");
}

TEST(StepParameters, AnOptimizerThatDoesNotStepApartRefuses) {
  const std::vector<Tensor> parameters = make_parameters(Device::cpu(0));
  testing::VelocityOptimizer velocity(parameters, 0.1f, 0.5f);
  EXPECT_FALSE(velocity.steps_parameters_apart());
  EXPECT_ERROR(velocity.step_parameters({0}),
               "VelocityOptimizer::step_parameters: this optimizer cannot step part of its parameters");
  EXPECT_ERROR(velocity.replayable_step_parameters({0}),
               "VelocityOptimizer::replayable_step_parameters: this optimizer cannot step part of its parameters");
  EXPECT_ERROR(velocity.creates_state({0}),
               "VelocityOptimizer::creates_state: this optimizer cannot step part of its parameters");
}

}  // namespace
}  // namespace tandem
