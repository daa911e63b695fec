// Module's two forms of forward (forward(input), forward_all(inputs)), the calls built on them, and MSELoss as a
// module with two inputs.

#include "support/test_support.h"

namespace tandem::testing {
namespace {

// mix(a, b) = a W + b with a fixed W [3, 2].
class Mix : public nn::Cloneable<Mix> {
 public:
  explicit Mix(Device device) : weight(Tensor::from_vector({1, -1, 2, 0.5f, 0, 3}, {3, 2}, device)) {
    register_parameter("weight", weight);
  }
  std::vector<Tensor> forward_all(const std::vector<Tensor>& inputs) override {
    check_input_count(inputs, 2);
    return {matmul(inputs[0], weight) + inputs[1]};
  }
  Tensor weight;
};

// Returns `copies` tensors, each the sum of its inputs (any number of them, at least one).
class SumCopies : public nn::Cloneable<SumCopies> {
 public:
  explicit SumCopies(size_t copies) : copies_(copies) {}
  std::vector<Tensor> forward_all(const std::vector<Tensor>& inputs) override {
    TANDEM_CHECK(!inputs.empty(), "SumCopies: no inputs");
    Tensor total = inputs[0];
    for (size_t i = 1; i < inputs.size(); ++i) total = total + inputs[i];
    return std::vector<Tensor>(copies_, total);
  }

 private:
  size_t copies_;
};

// Overrides neither form of forward.
class Neither : public nn::Module {};

// Overrides forward_all only and calls its child through the child's default forward(input).
class Outer : public nn::Cloneable<Outer> {
 public:
  Outer() { register_module("inner", inner); }
  std::vector<Tensor> forward_all(const std::vector<Tensor>& inputs) override {
    return {inner->forward(inputs.at(0)) * 2.0f};
  }
  std::shared_ptr<SumCopies> inner = std::make_shared<SumCopies>(1);
};

class ForwardFormsTest : public EveryDevice {};

TEST_P(ForwardFormsTest, MSELossModuleEqualsMseLossInValueAndGradient) {
  const Tensor input = Tensor::from_vector({-2, -0.5f, 0, 1.5f, 3, 1}, {3, 2}, device()).set_requires_grad();
  const Tensor reference_input = input.detach().clone().set_requires_grad();
  const Tensor target = Tensor::from_vector({1, 0.5f, -1, 1.5f, 2, 2}, {3, 2}, device());
  nn::MSELoss loss;
  const Tensor value = loss(input, target);
  const Tensor expected = nn::mse_loss(reference_input, target);
  // (9 + 1 + 1 + 0 + 1 + 1) / 6
  expect_values(value, {13.0 / 6.0}, {});
  expect_close(value, expected);
  value.backward();
  expected.backward();
  expect_close(input.grad(), reference_input.grad());
  expect_values(input.grad(), {-1, -1.0 / 3, 1.0 / 3, 0, 1.0 / 3, -1.0 / 3}, {3, 2});

  const std::vector<Tensor> all = loss.forward_all({input, target});
  ASSERT_EQ(all.size(), 1u);
  expect_close(all[0], expected);
}

TEST_P(ForwardFormsTest, MSELossRejectsOtherInputCounts) {
  const Tensor x = Tensor::ones({2, 2}, device());
  nn::MSELoss loss;
  EXPECT_ERROR(loss(x), "nn::Module::forward_all: MSELoss takes 2 inputs but got 1");
  EXPECT_ERROR(loss(x, x, x), "nn::Module::forward_all: MSELoss takes 2 inputs but got 3");
  EXPECT_ERROR(loss.forward_all({}), "nn::Module::forward_all: MSELoss takes 2 inputs but got 0");
  EXPECT_ERROR(loss(x, Tensor::ones({4}, device())), "nn::mse_loss: input has shape [2, 2] but target has shape [4]");
}

TEST_P(ForwardFormsTest, OneInputModuleAnswersForwardAllAndRejectsOtherCounts) {
  manual_seed(3);
  nn::Linear linear(3, 2, true, device());
  const Tensor x = Tensor::randn({4, 3}, device());
  const std::vector<Tensor> all = linear.forward_all({x});
  ASSERT_EQ(all.size(), 1u);
  expect_close(all[0], linear.forward(x));
  EXPECT_ERROR(linear(x, x), "nn::Module::forward_all: Linear takes 1 input but got 2");
  EXPECT_ERROR(linear.forward_all({}), "nn::Module::forward_all: Linear takes 1 input but got 0");
}

TEST_P(ForwardFormsTest, TwoInputModuleIsCalledWithTwoTensors) {
  Mix mix(device());
  const Tensor a = Tensor::from_vector({1, 2, 3, -1, 0, 1}, {2, 3}, device());
  const Tensor b = Tensor::from_vector({10, 20, 30, 40}, {2, 2}, device());
  // a W = [[1 + 4 + 0, -1 + 1 + 9], [-1 + 0 + 0, 1 + 0 + 3]]
  expect_values(mix(a, b), {15, 29, 29, 44}, {2, 2});
  EXPECT_ERROR(mix(a), "nn::Module::forward_all: Mix takes 2 inputs but got 1");
  EXPECT_ERROR(mix.forward(a), "nn::Module::forward_all: Mix takes 2 inputs but got 1");
}

TEST_P(ForwardFormsTest, VariadicCallAndDefaultForwardGoThroughForwardAll) {
  SumCopies sum_of(1);
  const Tensor a = Tensor::from_vector({1, 2}, {2}, device());
  const Tensor b = Tensor::from_vector({10, 20}, {2}, device());
  const Tensor c = Tensor::from_vector({100, 200}, {2}, device());
  expect_values(sum_of(a, b, c), {111, 222}, {2});
  expect_values(sum_of(a, b), {11, 22}, {2});
  expect_values(sum_of(a), {1, 2}, {2});  // forward(a): the default, through forward_all({a})
}

TEST_P(ForwardFormsTest, AModuleWithSeveralOutputsCannotBeCalledForOne) {
  SumCopies pair(2);
  const Tensor a = Tensor::from_vector({1, 2}, {2}, device());
  EXPECT_EQ(pair.forward_all({a, a}).size(), 2u);
  EXPECT_ERROR(pair(a, a), "nn::Module::operator(): SumCopies returned 2 outputs but one was expected");
  EXPECT_ERROR(pair(a), "nn::Module::forward: SumCopies returned 2 outputs but one was expected");
}

TEST_P(ForwardFormsTest, AModuleOverridingNeitherFormThrowsInsteadOfRecursing) {
  Neither neither;
  const Tensor x = Tensor::ones({2}, device());
  const std::string message =
      "nn::Module::forward_all: Neither overrides neither forward(const Tensor&) nor "
      "forward_all(const std::vector<Tensor>&)";
  EXPECT_ERROR(neither(x), message);
  EXPECT_ERROR(neither.forward_all({x}), message);
  EXPECT_ERROR(neither(x), message);  // the guard was reset by the exception
  // Another module's call on this thread is not mistaken for a recursion afterwards.
  expect_values(SumCopies(1)(x), {1, 1}, {2});
}

TEST_P(ForwardFormsTest, NestedDefaultForwardsKeepTheirOwnMarks) {
  Outer outer;
  const Tensor x = Tensor::from_vector({1, -2}, {2}, device());
  expect_values(outer(x), {2, -4}, {2});  // Outer's default forward runs SumCopies' default forward inside it
  expect_values(outer(x), {2, -4}, {2});
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(ForwardFormsTest);

}  // namespace
}  // namespace tandem::testing
