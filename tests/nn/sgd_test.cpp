// optim::SGD against sequences worked out by hand from torch.optim.SGD's update rule, option checks, state.
#include "support/test_support.h"

namespace tandem {
namespace {

using testing::expect_values;

class SgdTest : public testing::EveryDevice {
 protected:
  // Runs three steps on p (starting at p0) for the loss 0.5 * sum(p^2), whose gradient is p itself, and checks p
  // after each step against factor[k] * p0 (every quantity in the rule is then a multiple of p0).
  void expect_sequence(const optim::SGDOptions& options, const std::vector<double>& factors) {
    const std::vector<double> p0 = {1.0, -2.0, 0.5};
    Tensor p = Tensor::from_vector({1.0f, -2.0f, 0.5f}, {3}, device()).set_requires_grad(true);
    optim::SGD sgd({p}, options);
    for (double factor : factors) {
      sgd.zero_grad();
      (sum(p * p) * 0.5f).backward();
      sgd.step();
      expect_values(p, {factor * p0[0], factor * p0[1], factor * p0[2]}, {3});
    }
  }
};

TEST_P(SgdTest, Plain) {
  // p <- p - 0.1 p = 0.9 p
  expect_sequence({.lr = 0.1}, {0.9, 0.81, 0.729});
}

TEST_P(SgdTest, Momentum) {
  // buf = 1, p = 0.9 | buf = 0.9 * 1 + 0.9 = 1.8, p = 0.9 - 0.18 = 0.72 | buf = 1.62 + 0.72 = 2.34, p = 0.486
  expect_sequence({.lr = 0.1, .momentum = 0.9}, {0.9, 0.72, 0.486});
}

TEST_P(SgdTest, MomentumWithDampening) {
  // The first step takes d undamped: buf = 1, p = 0.9 | buf = 0.9 + 0.5 * 0.9 = 1.35, p = 0.765 |
  // buf = 1.215 + 0.3825 = 1.5975, p = 0.765 - 0.15975 = 0.60525
  expect_sequence({.lr = 0.1, .momentum = 0.9, .dampening = 0.5}, {0.9, 0.765, 0.60525});
}

TEST_P(SgdTest, WeightDecay) {
  // d = p + 0.1 p, p <- p - 0.11 p = 0.89 p
  expect_sequence({.lr = 0.1, .weight_decay = 0.1}, {0.89, 0.7921, 0.704969});
}

TEST_P(SgdTest, Nesterov) {
  // buf = 1, d = 1 + 0.9 = 1.9, p = 0.81 | buf = 0.9 + 0.81 = 1.71, d = 0.81 + 1.539 = 2.349, p = 0.5751 |
  // buf = 1.539 + 0.5751 = 2.1141, d = 0.5751 + 1.90269 = 2.47779, p = 0.327321
  expect_sequence({.lr = 0.1, .momentum = 0.9, .nesterov = true}, {0.81, 0.5751, 0.327321});
}

TEST_P(SgdTest, NesterovWithWeightDecay) {
  // d = 1.1, buf = 1.1, d = 1.1 + 0.99 = 2.09, p = 0.791 | d = 0.8701, buf = 0.99 + 0.8701 = 1.8601,
  // d = 0.8701 + 1.67409 = 2.54419, p = 0.536581 | p = 0.273767471
  expect_sequence({.lr = 0.1, .momentum = 0.9, .weight_decay = 0.1, .nesterov = true}, {0.791, 0.536581, 0.273767471});
}

TEST_P(SgdTest, SkipsParametersWithoutGradientAndStartsTheirMomentumLater) {
  Tensor a = Tensor::from_vector({2.0f}, {1}, device()).set_requires_grad(true);
  Tensor b = Tensor::from_vector({4.0f}, {1}, device()).set_requires_grad(true);
  optim::SGD sgd({a, b}, {.lr = 0.5, .momentum = 0.5});
  sum(a).backward();  // grad a = 1, b has none
  sgd.step();
  expect_values(a, {1.5}, {1});
  expect_values(b, {4.0}, {1});
  std::vector<Tensor> buffers = sgd.momentum_buffers();
  EXPECT_TRUE(buffers[0].defined());
  EXPECT_FALSE(buffers[1].defined());

  sgd.zero_grad();
  sum(a + b).backward();  // both get gradient 1; b's momentum starts now: buf = 1, b = 4 - 0.5
  sgd.step();
  expect_values(a, {1.5 - 0.5 * 1.5}, {1});  // buf = 0.5 * 1 + 1 = 1.5
  expect_values(b, {3.5}, {1});
  expect_values(sgd.momentum_buffers()[0], {1.5}, {1});
  expect_values(sgd.momentum_buffers()[1], {1.0}, {1});
}

TEST_P(SgdTest, MomentumBuffersRoundTripThroughAnotherOptimizer) {
  Tensor p = Tensor::from_vector({1.0f, 2.0f}, {2}, device()).set_requires_grad(true);
  optim::SGD first({p}, {.lr = 0.1, .momentum = 0.9});
  sum(p * p).backward();  // grad = 2p = [2, 4]
  first.step();           // buf = [2, 4], p = [0.8, 1.6]
  std::vector<Tensor> saved = first.momentum_buffers();
  std::vector<Tensor> on_host = {saved[0].to(Device::cpu())};

  optim::SGD second({p}, {.lr = 0.1, .momentum = 0.9});
  second.set_momentum_buffers(on_host);
  EXPECT_FALSE(second.momentum_buffers()[0].shares_storage_with(on_host[0]));
  EXPECT_EQ(second.momentum_buffers()[0].device(), device());
  second.zero_grad();
  sum(p * p).backward();  // grad = [1.6, 3.2]; buf = 0.9 * [2, 4] + grad = [3.4, 6.8]; p -= 0.1 buf
  second.step();
  expect_values(p, {0.8 - 0.34, 1.6 - 0.68}, {2});
  expect_values(on_host[0], {2, 4}, {2});  // the caller's tensor is not updated in place

  EXPECT_ERROR(second.set_momentum_buffers({}), "optim::SGD::set_momentum_buffers: got 0 buffers for 1 parameters");
  EXPECT_ERROR(second.set_momentum_buffers({Tensor::zeros({3})}),
               "optim::SGD::set_momentum_buffers: buffer 0 has shape [3] but parameter 0 has shape [2]");
  second.set_momentum_buffers({Tensor()});
  EXPECT_FALSE(second.momentum_buffers()[0].defined());
}

TEST_P(SgdTest, ZeroGradAndSetLr) {
  Tensor p = Tensor::from_vector({1.0f}, {1}, device()).set_requires_grad(true);
  optim::SGD sgd({p}, {.lr = 1.0});
  sum(p * 3.0f).backward();
  Tensor grad = p.grad();
  sgd.zero_grad(false);
  EXPECT_TRUE(p.grad().is_same(grad));
  expect_values(p.grad(), {0}, {1});
  sgd.zero_grad();
  EXPECT_FALSE(p.grad().defined());

  sgd.set_lr(0.25);
  EXPECT_EQ(sgd.options().lr, 0.25);
  sum(p * 2.0f).backward();
  sgd.step();
  expect_values(p, {0.5}, {1});
  EXPECT_ERROR(sgd.set_lr(-1), "optim::SGD::set_lr: lr must be >= 0, got -1");
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(SgdTest);

TEST(SgdErrors, OptionsAndParametersAreValidated) {
  Tensor p = Tensor::ones({2}).set_requires_grad(true);
  EXPECT_ERROR(optim::SGD({p}, {.lr = -0.1}), "optim::SGD: lr must be >= 0, got -0.1");
  EXPECT_ERROR(optim::SGD({p}, {.momentum = -1}), "optim::SGD: momentum must be >= 0, got -1");
  EXPECT_ERROR(optim::SGD({p}, {.weight_decay = -2}), "optim::SGD: weight_decay must be >= 0, got -2");
  EXPECT_ERROR(optim::SGD({p}, {.nesterov = true}),
               "optim::SGD: nesterov momentum needs momentum > 0 and dampening == 0, got momentum 0 and dampening 0");
  EXPECT_ERROR(optim::SGD({p}, {.momentum = 0.9, .dampening = 0.1, .nesterov = true}),
               "got momentum 0.9 and dampening 0.1");
  EXPECT_ERROR(optim::SGD({}, {}), "optim::SGD: got an empty parameter list");
  EXPECT_ERROR(optim::SGD({p, Tensor()}, {}), "optim::SGD: parameter 1 is undefined");
  EXPECT_ERROR(optim::SGD({p * 2.0f}, {}), "optim::SGD: parameter 0 is the result of an operation");
  EXPECT_ERROR(optim::SGD({p, p}, {}), "optim::SGD: parameters 0 and 1 are the same tensor");
}

}  // namespace
}  // namespace tandem
