// Functions that write their gradient straight into a leaf's .grad (Note [Gradients written in place]): when the
// engine allows it, what the hooks see, and every case in which the gradient goes to the leaf's accumulator instead.
#include "support/test_support.h"

#include <thread>

namespace tandem {
namespace {

using testing::expect_values;

class LeafGradientWriteTest : public testing::EveryDevice {};

// y = factor * x. backward offers its gradient to x's .grad through write_leaf_gradient (unless `decline`, in which
// case the writer refuses it), and returns it when that did not happen.
struct ScaleWritingLeaf : autograd::Function {
  explicit ScaleWritingLeaf(float factor, bool decline = false) : factor(factor), decline(decline) {}
  float factor;
  bool decline;
  int offered = 0;  // calls of the writer
  int written = 0;  // writes it made
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override { return {in[0] * factor}; }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    const Tensor gradient = grads[0] * factor;
    const bool wrote = write_leaf_gradient(0, [&](const Tensor& grad, bool overwrite) {
      ++offered;
      if (decline) return false;
      if (overwrite) {
        Tensor(grad).copy_(gradient);
      } else {
        Tensor(grad).add_(gradient);
      }
      ++written;
      return true;
    });
    return {wrote ? Tensor() : gradient};
  }
  std::string name() const override { return "ScaleWritingLeaf"; }
};

Tensor scaled(const std::shared_ptr<ScaleWritingLeaf>& function, const Tensor& x) {
  return autograd::apply(function, {x})[0];
}

// A leaf [2] that requires grad, with .grad = {10, 20} and a hook that records .grad each time it runs.
struct Leaf {
  explicit Leaf(Device device)
      : x(Tensor::from_vector({1, 2}, {2}, device).set_requires_grad()),
        grad(Tensor::from_vector({10, 20}, {2}, device)) {
    x.set_grad(grad);
    x.register_post_accumulate_grad_hook([this](const Tensor& leaf) { seen.push_back(leaf.grad().to_vector()); });
  }
  Tensor x;
  Tensor grad;
  std::vector<std::vector<float>> seen;
};

TEST_P(LeafGradientWriteTest, AnExistingGradIsWrittenInPlaceAndTheHooksRunOnce) {
  Leaf leaf(device());
  const auto function = std::make_shared<ScaleWritingLeaf>(3.0f);
  sum(scaled(function, leaf.x)).backward();
  EXPECT_EQ(function->offered, 1);
  EXPECT_EQ(function->written, 1);
  EXPECT_TRUE(leaf.x.grad().is_same(leaf.grad)) << ".grad keeps its tensor";
  expect_values(leaf.grad, {13, 23}, {2}, 0.0, 0.0);
  EXPECT_EQ(leaf.seen, (std::vector<std::vector<float>>{{13, 23}})) << "one hook call, after the write";
}

TEST_P(LeafGradientWriteTest, RetainedGraphWritesOncePerPass) {
  Leaf leaf(device());
  const auto function = std::make_shared<ScaleWritingLeaf>(3.0f);
  const Tensor loss = sum(scaled(function, leaf.x));
  loss.backward({}, /*retain_graph=*/true);
  loss.backward();
  EXPECT_EQ(function->written, 2);
  expect_values(leaf.grad, {16, 26}, {2}, 0.0, 0.0);
  EXPECT_EQ(leaf.seen, (std::vector<std::vector<float>>{{13, 23}, {16, 26}}));
}

TEST_P(LeafGradientWriteTest, WithoutAGradTheAccumulatorTakesTheGradient) {
  Tensor x = Tensor::from_vector({1, 2}, {2}, device()).set_requires_grad();
  int hooks = 0;
  x.register_post_accumulate_grad_hook([&](const Tensor&) { ++hooks; });
  const auto function = std::make_shared<ScaleWritingLeaf>(3.0f);
  sum(scaled(function, x)).backward();
  EXPECT_EQ(function->offered, 0) << "no .grad to write into";
  expect_values(x.grad(), {3, 3}, {2}, 0.0, 0.0);
  EXPECT_EQ(hooks, 1);
  sum(scaled(function, x)).backward();  // .grad exists now
  EXPECT_EQ(function->written, 1);
  expect_values(x.grad(), {6, 6}, {2}, 0.0, 0.0);
  EXPECT_EQ(hooks, 2);
}

TEST_P(LeafGradientWriteTest, ALeafUsedTwiceIsSummedByItsAccumulator) {
  // Used by this node and another one: one accumulation of the summed gradients, one hook call.
  Leaf leaf(device());
  const auto function = std::make_shared<ScaleWritingLeaf>(3.0f);
  sum(scaled(function, leaf.x) + leaf.x * 2.0f).backward();
  EXPECT_EQ(function->offered, 0);
  expect_values(leaf.grad, {15, 25}, {2}, 0.0, 0.0);
  EXPECT_EQ(leaf.seen.size(), 1u);

  // Used by two nodes that could each write: neither does.
  const auto first = std::make_shared<ScaleWritingLeaf>(1.0f);
  const auto second = std::make_shared<ScaleWritingLeaf>(4.0f);
  sum(scaled(first, leaf.x) + scaled(second, leaf.x)).backward();
  EXPECT_EQ(first->offered + second->offered, 0);
  expect_values(leaf.grad, {20, 30}, {2}, 0.0, 0.0);
  EXPECT_EQ(leaf.seen.size(), 2u);

  // Also a root of the pass, whose seed waits for the accumulator.
  const auto rooted = std::make_shared<ScaleWritingLeaf>(3.0f);
  autograd::backward({sum(scaled(rooted, leaf.x)), leaf.x}, {Tensor(), Tensor::ones({2}, device())});
  EXPECT_EQ(rooted->offered, 0);
  expect_values(leaf.grad, {24, 34}, {2}, 0.0, 0.0);
  EXPECT_EQ(leaf.seen.size(), 3u);
}

TEST_P(LeafGradientWriteTest, ThroughAViewTheGradientTravels) {
  // The node's input is a view of the leaf, not the leaf: its edge leads to the view's node.
  Leaf leaf(device());
  const auto function = std::make_shared<ScaleWritingLeaf>(3.0f);
  sum(scaled(function, leaf.x.narrow(0, 1, 1))).backward();
  EXPECT_EQ(function->offered, 0);
  expect_values(leaf.grad, {10, 23}, {2}, 0.0, 0.0);
}

TEST_P(LeafGradientWriteTest, AWriterThatDeclinesLeavesTheGradientToTheAccumulator) {
  Leaf leaf(device());
  const auto function = std::make_shared<ScaleWritingLeaf>(3.0f, /*decline=*/true);
  sum(scaled(function, leaf.x)).backward();
  EXPECT_EQ(function->offered, 1);
  EXPECT_EQ(function->written, 0);
  expect_values(leaf.grad, {13, 23}, {2}, 0.0, 0.0);
  EXPECT_EQ(leaf.seen.size(), 1u);
}

TEST_P(LeafGradientWriteTest, PassesOnSeveralThreadsWriteOneAtATime) {
  Leaf leaf(device());
  std::vector<std::shared_ptr<ScaleWritingLeaf>> functions;
  std::vector<Tensor> losses;
  for (int i = 0; i < 4; ++i) {
    functions.push_back(std::make_shared<ScaleWritingLeaf>(static_cast<float>(i + 1)));
    losses.push_back(sum(scaled(functions.back(), leaf.x)));
  }
  std::vector<std::thread> threads;
  for (const Tensor& loss : losses) threads.emplace_back([&loss] { loss.backward(); });
  for (std::thread& thread : threads) thread.join();
  for (const auto& function : functions) EXPECT_EQ(function->written, 1);
  expect_values(leaf.grad, {20, 30}, {2}, 0.0, 0.0);  // 1 + 2 + 3 + 4 more on each element
  EXPECT_EQ(leaf.seen.size(), 4u);
}

TEST_P(LeafGradientWriteTest, MisusesAreReported) {
  struct WritesAndReturns : autograd::Function {
    std::vector<Tensor> forward(const std::vector<Tensor>& in) override { return {in[0] * 2.0f}; }
    std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
      write_leaf_gradient(0, [&](const Tensor& grad, bool) {
        Tensor(grad).add_(grads[0]);
        return true;
      });
      return {grads[0]};
    }
    std::string name() const override { return "WritesAndReturns"; }
  };
  struct WritesTwice : autograd::Function {
    std::vector<Tensor> forward(const std::vector<Tensor>& in) override { return {in[0] * 2.0f}; }
    std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
      const auto write = [&](const Tensor& grad, bool) {
        Tensor(grad).add_(grads[0]);
        return true;
      };
      write_leaf_gradient(0, write);
      write_leaf_gradient(0, write);
      return {Tensor()};
    }
    std::string name() const override { return "WritesTwice"; }
  };
  struct WritesAnotherInput : autograd::Function {
    std::vector<Tensor> forward(const std::vector<Tensor>& in) override { return {in[0] * 2.0f}; }
    std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
      write_leaf_gradient(3, [](const Tensor&, bool) { return true; });
      return {grads[0]};
    }
    std::string name() const override { return "WritesAnotherInput"; }
  };
  Leaf leaf(device());
  EXPECT_ERROR(
      sum(autograd::apply(std::make_shared<WritesAndReturns>(), {leaf.x})[0]).backward(),
      "backward: WritesAndReturns::backward wrote the gradient of input 0 into its leaf and also returned one");
  EXPECT_ERROR(sum(autograd::apply(std::make_shared<WritesTwice>(), {leaf.x})[0]).backward(),
               "autograd::Function::write_leaf_gradient: WritesTwice wrote the gradient of input 0 twice in one "
               "backward");
  EXPECT_ERROR(sum(autograd::apply(std::make_shared<WritesAnotherInput>(), {leaf.x})[0]).backward(),
               "autograd::Function::write_leaf_gradient: WritesAnotherInput asked for input 3 but it has 1 inputs");
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(LeafGradientWriteTest);

}  // namespace
}  // namespace tandem
