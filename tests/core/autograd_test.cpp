// Graph recording, accumulation, grad mode, custom Functions, graphs that span devices.
#include "support/test_support.h"

#include <thread>

namespace tandem {
namespace {

using testing::expect_values;

class AutogradTest : public testing::EveryDevice {};

TEST_P(AutogradTest, LeavesAccumulateAcrossBackwardCalls) {
  Tensor x = Tensor::from_vector({1, 2, 3}, {3}, device()).set_requires_grad();
  EXPECT_TRUE(x.is_leaf());
  Tensor y = sum(x * x);
  EXPECT_FALSE(y.is_leaf());
  EXPECT_TRUE(y.requires_grad());
  ASSERT_NE(y.grad_fn(), nullptr);
  y.backward();
  expect_values(x.grad(), {2, 4, 6}, {3});
  const void* storage = x.grad().data_ptr();
  sum(x * 3.0f).backward();
  expect_values(x.grad(), {5, 7, 9}, {3});
  EXPECT_EQ(x.grad().data_ptr(), storage) << "accumulation must happen in place";
}

TEST_P(AutogradTest, GradientsThatMeetAreSummed) {
  Tensor x = Tensor::from_vector({2}, {1}, device()).set_requires_grad();
  Tensor a = x * 3.0f;
  Tensor b = x * x;
  (a + b + a * b).backward(Tensor::ones({1}, device()));
  // d/dx (3x + x^2 + 3x^3) = 3 + 2x + 9x^2 = 43 at x = 2
  expect_values(x.grad(), {43}, {1});
}

TEST_P(AutogradTest, NoGradGuardStopsRecording) {
  Tensor x = Tensor::ones({2}, device()).set_requires_grad();
  {
    NoGradGuard no_grad;
    EXPECT_FALSE(GradMode::is_enabled());
    Tensor y = x * 2.0f;
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
  }
  EXPECT_TRUE(GradMode::is_enabled());
  EXPECT_TRUE((x * 2.0f).requires_grad());
}

TEST_P(AutogradTest, GradModeIsPerThread) {
  NoGradGuard no_grad;
  bool enabled_in_other_thread = false;
  std::thread([&] { enabled_in_other_thread = GradMode::is_enabled(); }).join();
  EXPECT_TRUE(enabled_in_other_thread);
  EXPECT_FALSE(GradMode::is_enabled());
}

TEST_P(AutogradTest, DetachCutsTheGraph) {
  Tensor x = Tensor::ones({2}, device()).set_requires_grad();
  Tensor d = (x * 2.0f).detach();
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
  expect_values(d, {2, 2}, {2});
}

TEST_P(AutogradTest, Errors) {
  Tensor x = Tensor::ones({2}, device()).set_requires_grad();
  EXPECT_ERROR(Tensor::ones({2}, device()).backward(), "does not require grad");
  EXPECT_ERROR((x * 2.0f).backward(), "only for one-element tensors, got shape [2]");
  EXPECT_ERROR((x * 2.0f).backward(Tensor::ones({3}, device())), "grad_output has shape [3]");
  EXPECT_ERROR((x * 2.0f).set_requires_grad(), "only leaves can be set");
  Tensor y = sum(x * x);
  y.backward();
  EXPECT_ERROR(y.backward(), "was already run backward");
}

TEST_P(AutogradTest, GradientsFlowThroughDeviceCopies) {
  // cpu:0 -> (this device) -> cpu:1: the graph spans three devices; each gradient lands on its leaf's device.
  Tensor x = Tensor::from_vector({1, 2}, {2}, Device::cpu(0)).set_requires_grad();
  Tensor w = Tensor::from_vector({3, 4}, {2}, device()).set_requires_grad();
  Tensor y = x.to(device()) * w;
  Tensor loss = sum(y.to(Device::cpu(1)) * y.to(Device::cpu(1)));
  loss.backward();
  EXPECT_EQ(x.grad().device(), Device::cpu(0));
  EXPECT_EQ(w.grad().device(), device());
  // loss = sum (x w)^2: dx = 2 x w^2, dw = 2 w x^2
  expect_values(x.grad(), {18, 64}, {2});
  expect_values(w.grad(), {6, 32}, {2});
}

// y = x^3 written by a user, with its own backward.
struct Cube : autograd::Function {
  Tensor x;
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    x = in[0];
    return {x * x * x};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override { return {grads[0] * x * x * 3.0f}; }
  std::string name() const override { return "Cube"; }
};

TEST_P(AutogradTest, CustomFunction) {
  Tensor x = Tensor::from_vector({1, -2, 0.5f}, {3}, device()).set_requires_grad();
  Tensor y = autograd::apply(std::make_shared<Cube>(), {x})[0];
  EXPECT_EQ(y.grad_fn()->name(), "Cube");
  expect_values(y, {1, -8, 0.125}, {3});
  testing::gradcheck([](auto& in) { return autograd::apply(std::make_shared<Cube>(), in)[0]; }, {x});
}

struct WrongShape : autograd::Function {
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override { return {in[0] * 2.0f}; }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    return {Tensor::ones({5}, grads[0].device())};
  }
  std::string name() const override { return "WrongShape"; }
};

TEST_P(AutogradTest, CustomFunctionMistakesAreReported) {
  Tensor x = Tensor::ones({3}, device()).set_requires_grad();
  Tensor y = autograd::apply(std::make_shared<WrongShape>(), {x})[0];
  EXPECT_ERROR(sum(y).backward(), "WrongShape::backward returned a gradient of shape [5] for input 0 of shape [3]");
}

TEST_P(AutogradTest, OutputThatIsAnInputKeepsTheInputIntact) {
  struct Identity : autograd::Function {
    std::vector<Tensor> forward(const std::vector<Tensor>& in) override { return {in[0]}; }
    std::vector<Tensor> backward(const std::vector<Tensor>& grads) override { return {grads[0] * 5.0f}; }
  };
  Tensor x = Tensor::ones({2}, device()).set_requires_grad();
  Tensor y = autograd::apply(std::make_shared<Identity>(), {x})[0];
  EXPECT_TRUE(x.is_leaf());
  EXPECT_FALSE(y.is_leaf());
  EXPECT_TRUE(y.shares_storage_with(x));
  sum(y).backward();
  expect_values(x.grad(), {5, 5}, {2});
}

TEST_P(AutogradTest, PostAccumulateGradHooksRunAfterEachAccumulation) {
  Tensor x = Tensor::from_vector({1, 2}, {2}, device()).set_requires_grad();
  std::vector<std::vector<float>> seen;  // x.grad() as the first hook saw it, call by call
  std::vector<int> calls;                // which hook ran, in order
  const uint64_t first = x.register_post_accumulate_grad_hook([&](const Tensor& leaf) {
    EXPECT_TRUE(leaf.is_same(x));
    seen.push_back(leaf.grad().to_vector());
    calls.push_back(1);
  });
  x.register_post_accumulate_grad_hook([&](const Tensor&) { calls.push_back(2); });
  sum(x * x).backward();     // d/dx = 2x = {2, 4}
  sum(x * 3.0f).backward();  // accumulated: {5, 7}
  EXPECT_EQ(seen, (std::vector<std::vector<float>>{{2, 4}, {5, 7}}));
  EXPECT_EQ(calls, (std::vector<int>{1, 2, 1, 2}));

  // Gradients that meet are summed before they reach the leaf: one accumulation, one call per hook.
  sum(x * x + x).backward();
  EXPECT_EQ(calls.size(), 6u);
  EXPECT_EQ(seen.back(), (std::vector<float>{8, 12}));  // {5, 7} + 2x + 1

  x.remove_post_accumulate_grad_hook(first);
  x.remove_post_accumulate_grad_hook(first);  // already removed: nothing happens
  sum(x).backward();
  EXPECT_EQ(calls, (std::vector<int>{1, 2, 1, 2, 1, 2, 2}));
  EXPECT_EQ(seen.size(), 3u);

  Tensor w = Tensor::ones({2}, device()).set_requires_grad();
  w.register_post_accumulate_grad_hook([](const Tensor&) { TANDEM_FAIL("hook: refused"); });
  EXPECT_ERROR(sum(w * 2.0f).backward(), "hook: refused");
  expect_values(w.grad(), {2, 2}, {2});  // the hook runs after the accumulation

  const auto nothing = [](const Tensor&) {};
  EXPECT_ERROR((x * 2.0f).register_post_accumulate_grad_hook(nothing),
               "Tensor::register_post_accumulate_grad_hook: the tensor is the result of an operation but expected a "
               "leaf that requires grad");
  EXPECT_ERROR(Tensor::ones({2}, device()).register_post_accumulate_grad_hook(nothing),
               "the tensor is a leaf that does not require grad");
  EXPECT_ERROR(Tensor().register_post_accumulate_grad_hook(nothing), "register_post_accumulate_grad_hook");
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(AutogradTest);

}  // namespace
}  // namespace tandem
