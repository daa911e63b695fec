// optim::Optimizer: SGD through the interface that code above nn drives every optimizer with.
#include "support/test_support.h"

namespace tandem {
namespace {

using testing::expect_values;

TEST(Optimizer, SgdThroughTheInterfaceStepsAndKeepsItsMomentumAsState) {
  Tensor p = Tensor::from_vector({1.0f, -2.0f}, {2}).set_requires_grad(true);
  Tensor frozen_out = Tensor::from_vector({3.0f}, {1}).set_requires_grad(true);
  std::unique_ptr<optim::Optimizer> optimizer =
      std::make_unique<optim::SGD>(std::vector<Tensor>{p, frozen_out}, optim::SGDOptions{.lr = 0.1, .momentum = 0.9});
  EXPECT_EQ(optimizer->parameters().size(), 2u);
  sum(p * 2.0f).backward();  // no gradient for the second parameter: no state for it
  optimizer->step();
  expect_values(p, {0.8, -2.2}, {2});
  std::vector<Tensor> state = optimizer->state();
  ASSERT_EQ(state.size(), 2u);
  expect_values(state[0], {2.0, 2.0}, {2});
  EXPECT_FALSE(state[1].defined());

  optimizer->set_state({Tensor::full({2}, 10.0f), Tensor()});
  optimizer->zero_grad(/*set_to_none=*/false);
  expect_values(p.grad(), {0.0, 0.0}, {2});
  optimizer->step();  // buf = 0.9 * 10 + 0 = 9
  expect_values(p, {-0.1, -3.1}, {2});
  EXPECT_ERROR(optimizer->set_state({Tensor()}), "optim::SGD::set_momentum_buffers: got 1 buffers for 2 parameters");
}

// Note [Gradient checks] in tandem/core/tensor.h: every optimizer runs its parameters' checks before it reads a
// gradient, in step() and in prepare_replay(), and updates nothing when one refuses.
TEST(Optimizer, EveryOptimizerRunsTheGradientChecksBeforeStepping) {
  Tensor p = Tensor::from_vector({1.0f, -2.0f}, {2}).set_requires_grad(true);
  bool ready = false;
  p.set_grad_check([&](const std::string& user) { TANDEM_CHECK(ready, user, ": not reduced yet"); });
  sum(p * 2.0f).backward();
  optim::SGD sgd({p}, {.lr = 0.5, .momentum = 0.9});
  optim::Adam adam({p}, {});
  optim::AdamW adamw({p}, {});
  EXPECT_ERROR(sgd.step(), "optim::SGD::step: not reduced yet");
  EXPECT_ERROR(adam.step(), "optim::Adam::step: not reduced yet");
  EXPECT_ERROR(adamw.step(), "optim::AdamW::step: not reduced yet");
  EXPECT_ERROR(sgd.prepare_replay(), "optim::SGD::prepare_replay: not reduced yet");
  EXPECT_ERROR(adamw.prepare_replay(), "optim::AdamW::prepare_replay: not reduced yet");
  expect_values(p, {1.0, -2.0}, {2});
  EXPECT_FALSE(sgd.state()[0].defined()) << "a refused step creates no state";
  ready = true;
  sgd.step();
  expect_values(p, {0.0, -3.0}, {2});
  p.set_grad_check(nullptr);
}

}  // namespace
}  // namespace tandem
