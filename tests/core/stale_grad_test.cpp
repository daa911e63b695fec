// Stale gradients (Note [Stale gradients] in tandem/core/tensor.h): a .grad marked stale is written over by the next
// backward, both by the accumulator and by a linear layer writing its weight gradient in place, and reads as zeros
// until then.
#include "support/test_support.h"

#include <cmath>
#include <limits>

namespace tandem {
namespace {

using testing::expect_values;

class StaleGradTest : public testing::EveryDevice {};

// A .grad of the leaf's shape full of NaN, marked stale: any addition onto it would show.
Tensor stale_nan_grad(const Tensor& leaf) {
  Tensor grad = Tensor::full(leaf.shape(), std::numeric_limits<float>::quiet_NaN(), leaf.device());
  leaf.set_grad(grad);
  leaf.mark_grad_stale();
  return grad;
}

TEST_P(StaleGradTest, BackwardWritesOverAStaleGradient) {
  for (const bool fused : {true, false}) {
    SCOPED_TRACE(fused ? "fused linear" : "plain linear");
    const bool previous = fused_linear();
    set_fused_linear(fused);
    manual_seed(1);
    Tensor x = Tensor::randn({6, 5}, device());
    Tensor w = Tensor::randn({4, 5}, device()).set_requires_grad();
    Tensor b = Tensor::randn({4}, device()).set_requires_grad();
    const Tensor r = Tensor::randn({6, 4}, device());
    linear(x, w, b).backward(r);
    const Tensor dw = w.grad().clone(), db = b.grad().clone();

    const Tensor w_grad = stale_nan_grad(w);
    const Tensor b_grad = stale_nan_grad(b);
    EXPECT_TRUE(w.grad_is_stale());
    linear(x, w, b).backward(r);
    EXPECT_FALSE(w.grad_is_stale());
    EXPECT_FALSE(b.grad_is_stale());
    EXPECT_TRUE(w.grad().is_same(w_grad)) << "the stale .grad keeps its storage";
    EXPECT_TRUE(b.grad().is_same(b_grad));
    testing::expect_close(w.grad(), dw);
    testing::expect_close(b.grad(), db);

    linear(x, w, b).backward(r);  // no longer stale: accumulates
    testing::expect_close(w.grad(), dw * 2.0f);
    testing::expect_close(b.grad(), db * 2.0f);
    set_fused_linear(previous);
  }
}

// The weight's and the bias's .grad of one linear layer, each stale (written over), accumulating (added to) or
// missing (the accumulator takes the gradient), in every combination: each ends with its own correct gradient.
TEST_P(StaleGradTest, WeightAndBiasGradientsMixStaleAccumulatingAndMissing) {
  enum class Grad { Stale, Accumulating, Missing };
  manual_seed(2);
  const Tensor x = Tensor::randn({7, 3}, device());
  const Tensor r = Tensor::randn({7, 2}, device());
  Tensor w = Tensor::randn({2, 3}, device()).set_requires_grad();
  Tensor b = Tensor::randn({2}, device()).set_requires_grad();
  linear(x, w, b).backward(r);
  const Tensor dw = w.grad().clone(), db = b.grad().clone();
  const auto prepare = [](const Tensor& leaf, Grad kind) {
    leaf.set_grad(Tensor());
    if (kind == Grad::Stale) stale_nan_grad(leaf);
    if (kind == Grad::Accumulating) leaf.set_grad(Tensor::ones(leaf.shape(), leaf.device()));
  };
  const auto expected = [](const Tensor& gradient, Grad kind) {
    return kind == Grad::Accumulating ? gradient + 1.0f : gradient;
  };
  const bool previous = fused_linear();
  for (const bool fused : {true, false}) {
    set_fused_linear(fused);
    for (const Grad weight : {Grad::Stale, Grad::Accumulating, Grad::Missing}) {
      for (const Grad bias : {Grad::Stale, Grad::Accumulating, Grad::Missing}) {
        SCOPED_TRACE(std::string(fused ? "fused" : "plain") + " linear, weight " +
                     std::to_string(static_cast<int>(weight)) + ", bias " + std::to_string(static_cast<int>(bias)));
        prepare(w, weight);
        prepare(b, bias);
        linear(x, w, b).backward(r);
        testing::expect_close(w.grad(), expected(dw, weight));
        testing::expect_close(b.grad(), expected(db, bias));
      }
    }
  }
  set_fused_linear(previous);
}

TEST_P(StaleGradTest, ALeafUsedTwiceGetsBothGradients) {
  Tensor w = Tensor::from_vector({1, 2}, {2}, device()).set_requires_grad();
  stale_nan_grad(w);
  (w * 3.0f + w * 4.0f).backward(Tensor::ones({2}, device()));
  expect_values(w.grad(), {7, 7}, {2});
}

TEST_P(StaleGradTest, ReadingAStaleGradientGivesZeros) {
  Tensor w = Tensor::from_vector({1, 2, 3}, {3}, device()).set_requires_grad();
  const Tensor grad = stale_nan_grad(w);
  expect_values(w.grad(), {0, 0, 0}, {3});
  EXPECT_FALSE(w.grad_is_stale());
  expect_values(grad, {0, 0, 0}, {3});  // zeroed in place
}

TEST_P(StaleGradTest, SetGradClearsTheMarkAndNoGradIsNeverStale) {
  Tensor w = Tensor::from_vector({1, 2}, {2}, device()).set_requires_grad();
  w.mark_grad_stale();
  EXPECT_FALSE(w.grad_is_stale()) << "nothing to mark without a .grad";
  stale_nan_grad(w);
  w.set_grad(Tensor::from_vector({5, 6}, {2}, device()));
  EXPECT_FALSE(w.grad_is_stale());
  expect_values(w.grad(), {5, 6}, {2});
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(StaleGradTest);

}  // namespace
}  // namespace tandem
