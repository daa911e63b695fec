// mse_loss, l1_loss, smooth_l1_loss and binary_cross_entropy_with_logits: every reduction against float64 references
// computed here, gradient checks, stability for large logits, and their errors.
#include <cmath>
#include <functional>
#include <limits>

#include "support/test_support.h"

namespace tandem {
namespace {

using nn::Reduction;
using testing::expect_close;
using testing::expect_values;
using testing::to_double;

class ElementwiseLoss : public testing::EveryDevice {};

using testing::kReductions;

// The per-element losses reduced as `reduction` says, in float64.
std::vector<double> reduced(const std::vector<double>& losses, Reduction reduction) {
  if (reduction == Reduction::None) return losses;
  double total = 0.0;
  for (double v : losses) total += v;
  return {reduction == Reduction::Sum ? total : total / static_cast<double>(losses.size())};
}

Shape reduced_shape(const Shape& shape, Reduction reduction) { return reduction == Reduction::None ? shape : Shape{}; }

// The float64 losses of each element pair.
std::vector<double> elementwise(const Tensor& input, const Tensor& target,
                                const std::function<double(double, double)>& loss) {
  const std::vector<double> x = to_double(input), y = to_double(target);
  std::vector<double> out(x.size());
  for (size_t i = 0; i < x.size(); ++i) out[i] = loss(x[i], y[i]);
  return out;
}

double softplus(double v) { return std::max(v, 0.0) + std::log1p(std::exp(-std::abs(v))); }

// Inputs whose differences avoid the kinks (|d| = 0 for l1, |d| = beta for smooth_l1) by more than gradcheck's step.
struct Pair {
  Tensor input, target;
};
Pair regression_pair(Device device) {
  return {Tensor::from_vector({0.5f, -1.25f, 2.0f, 0.1f, -3.0f, 1.7f}, {2, 3}, device),
          Tensor::from_vector({0.2f, 0.5f, -1.0f, 0.3f, -2.5f, 3.1f}, {2, 3}, device)};
}

TEST_P(ElementwiseLoss, MSEAndL1MatchFloat64ForEveryReduction) {
  const Pair p = regression_pair(device());
  const auto squared = elementwise(p.input, p.target, [](double x, double y) { return (x - y) * (x - y); });
  const auto absolute = elementwise(p.input, p.target, [](double x, double y) { return std::abs(x - y); });
  for (Reduction r : kReductions) {
    SCOPED_TRACE(nn::reduction_name(r));
    expect_values(nn::mse_loss(p.input, p.target, r), reduced(squared, r), reduced_shape({2, 3}, r));
    expect_values(nn::l1_loss(p.input, p.target, r), reduced(absolute, r), reduced_shape({2, 3}, r));
  }
  expect_values(nn::mse_loss(p.input, p.target), reduced(squared, Reduction::Mean), {});  // Mean is the default
}

TEST_P(ElementwiseLoss, SmoothL1MatchesFloat64ForEveryReductionAndBeta) {
  const Pair p = regression_pair(device());
  for (double beta : {1.0, 0.5, 2.5, 0.0}) {
    const auto expected = elementwise(p.input, p.target, [beta](double x, double y) {
      const double d = std::abs(x - y);
      return d < beta ? 0.5 * d * d / beta : d - 0.5 * beta;
    });
    for (Reduction r : kReductions) {
      SCOPED_TRACE(std::string(nn::reduction_name(r)) + " beta " + std::to_string(beta));
      expect_values(nn::smooth_l1_loss(p.input, p.target, {.reduction = r, .beta = beta}), reduced(expected, r),
                    reduced_shape({2, 3}, r));
    }
  }
}

TEST_P(ElementwiseLoss, BCEWithLogitsMatchesFloat64WithWeightsAndPosWeight) {
  const Tensor x = Tensor::from_vector({0.3f, -2.0f, 4.5f, -0.7f, 1.2f, 0.0f}, {2, 3}, device());
  const Tensor y = Tensor::from_vector({1.0f, 0.0f, 0.25f, 1.0f, 0.0f, 0.6f}, {2, 3}, device());
  const Tensor weight = Tensor::from_vector({0.5f, 2.0f}, {2, 1}, device());
  const Tensor pos_weight = Tensor::from_vector({3.0f, 0.5f, 1.5f}, {3}, device());
  const std::vector<double> w = {0.5, 0.5, 0.5, 2.0, 2.0, 2.0}, p = {3.0, 0.5, 1.5, 3.0, 0.5, 1.5};
  for (bool with_weight : {false, true})
    for (bool with_pos_weight : {false, true}) {
      std::vector<double> expected = elementwise(x, y, [](double a, double b) { return softplus(a) - a * b; });
      const std::vector<double> xs = to_double(x), ys = to_double(y);
      for (size_t i = 0; i < expected.size(); ++i) {
        // -(p y log sigmoid(x) + (1 - y) log(1 - sigmoid(x))), w times that
        const double positive = with_pos_weight ? p[i] : 1.0;
        expected[i] = positive * ys[i] * softplus(-xs[i]) + (1.0 - ys[i]) * softplus(xs[i]);
        if (with_weight) expected[i] *= w[i];
      }
      for (Reduction r : kReductions) {
        SCOPED_TRACE(std::string(nn::reduction_name(r)) + (with_weight ? " weight" : "") +
                     (with_pos_weight ? " pos_weight" : ""));
        const nn::BCEWithLogitsLossOptions options{.weight = with_weight ? weight : Tensor(),
                                                   .reduction = r,
                                                   .pos_weight = with_pos_weight ? pos_weight : Tensor()};
        expect_values(nn::binary_cross_entropy_with_logits(x, y, options), reduced(expected, r),
                      reduced_shape({2, 3}, r));
      }
    }
}

TEST_P(ElementwiseLoss, BCEWithLogitsIsStableAndExactAtZero) {
  // Logits of 1e4 overflow exp(x) in float32; the loss is max(x, 0) - x y + log(1 + exp(-|x|)).
  const Tensor x = Tensor::from_vector({1e4f, -1e4f, 1e4f, -1e4f, 0.0f, 0.0f}, {6}, device()).set_requires_grad(true);
  const Tensor y = Tensor::from_vector({1.0f, 0.0f, 0.0f, 1.0f, 1.0f, 0.25f}, {6}, device());
  const Tensor loss = nn::binary_cross_entropy_with_logits(x, y, {.reduction = Reduction::None});
  expect_values(loss, {0.0, 0.0, 1e4, 1e4, std::log(2.0), std::log(2.0)}, {6}, 1e-6, 1e-6);
  nn::binary_cross_entropy_with_logits(x, y, {.reduction = Reduction::Sum}).backward();
  // sigmoid(x) - y: exactly 0.5 - y at x = 0, where a composition of max and |x| would give 1 - y.
  expect_values(x.grad(), {0.0, 0.0, 1.0, -1.0, -0.5, 0.25}, {6}, 1e-6, 1e-7);
}

TEST_P(ElementwiseLoss, GradientsPassGradcheckForEveryReduction) {
  const Pair p = regression_pair(device());
  const Tensor input = p.input.detach().set_requires_grad(true);
  const Tensor target = p.target.detach().set_requires_grad(true);
  const Tensor probabilities = Tensor::from_vector({0.9f, 0.1f, 0.5f, 0.0f, 1.0f, 0.3f}, {2, 3}, device());
  const Tensor y = probabilities.detach().set_requires_grad(true);
  const Tensor pos_weight = Tensor::from_vector({2.0f, 0.5f, 1.0f}, {3}, device());
  const Tensor weight = Tensor::from_vector({1.5f, 0.25f}, {2, 1}, device());
  for (Reduction r : kReductions) {
    SCOPED_TRACE(nn::reduction_name(r));
    testing::gradcheck([r](const std::vector<Tensor>& in) { return nn::mse_loss(in[0], in[1], r); }, {input, target});
    testing::gradcheck([r](const std::vector<Tensor>& in) { return nn::l1_loss(in[0], in[1], r); }, {input, target});
    for (double beta : {1.0, 0.5}) {
      testing::gradcheck(
          [r, beta](const std::vector<Tensor>& in) {
            return nn::smooth_l1_loss(in[0], in[1], {.reduction = r, .beta = beta});
          },
          {input, target});
    }
    testing::gradcheck(
        [&](const std::vector<Tensor>& in) {
          return nn::binary_cross_entropy_with_logits(in[0], in[1], {.reduction = r});
        },
        {input, y});
    testing::gradcheck(
        [&](const std::vector<Tensor>& in) {
          return nn::binary_cross_entropy_with_logits(in[0], in[1],
                                                      {.weight = weight, .reduction = r, .pos_weight = pos_weight});
        },
        {input, y});
  }
}

TEST_P(ElementwiseLoss, ModulesApplyTheirOptions) {
  const Pair p = regression_pair(device());
  const Tensor pos_weight = Tensor::from_vector({2.0f, 0.5f, 1.0f}, {3}, device());
  expect_close(nn::MSELoss(Reduction::Sum)(p.input, p.target), nn::mse_loss(p.input, p.target, Reduction::Sum));
  expect_close(nn::L1Loss(Reduction::None)(p.input, p.target), nn::l1_loss(p.input, p.target, Reduction::None));
  expect_close(nn::SmoothL1Loss({.beta = 0.5})(p.input, p.target),
               nn::smooth_l1_loss(p.input, p.target, {.beta = 0.5}));
  const Tensor y = Tensor::full({2, 3}, 0.5f, device());
  expect_close(nn::BCEWithLogitsLoss({.pos_weight = pos_weight})(p.input, y),
               nn::binary_cross_entropy_with_logits(p.input, y, {.pos_weight = pos_weight}));
  EXPECT_EQ(nn::SmoothL1Loss({.reduction = Reduction::Sum, .beta = 0.5}).extra_repr(), "reduction=sum, beta=0.5");
  EXPECT_EQ(nn::BCEWithLogitsLoss({.pos_weight = pos_weight}).extra_repr(),
            "reduction=mean, weight=none, pos_weight=[3]");
  nn::MSELoss mse;
  EXPECT_ERROR(mse.forward_all({p.input}), "2");
}

TEST_P(ElementwiseLoss, ErrorsNameTheLossAndTheBadValue) {
  const Pair p = regression_pair(device());
  EXPECT_ERROR(nn::mse_loss(p.input, Tensor::zeros({3, 2}, device())),
               "nn::mse_loss: input has shape [2, 3] but target has shape [3, 2]; they must be equal");
  EXPECT_ERROR(nn::l1_loss(p.input, Tensor::zeros({2, 3}, DType::Int64, device())),
               "nn::l1_loss: target is int64 but expected float32");
  EXPECT_ERROR(nn::l1_loss(Tensor(), p.target), "nn::l1_loss: the input is undefined");
  EXPECT_ERROR(nn::smooth_l1_loss(p.input, p.target, {.beta = -1.0}), "nn::smooth_l1_loss: beta is -1");
  EXPECT_ERROR(nn::smooth_l1_loss(p.input, p.target, {.beta = std::numeric_limits<double>::infinity()}),
               "nn::smooth_l1_loss: beta is inf");
  EXPECT_ERROR(nn::binary_cross_entropy_with_logits(p.input, p.target, {.pos_weight = Tensor::ones({2}, device())}),
               "nn::binary_cross_entropy_with_logits: ");
  EXPECT_ERROR(nn::binary_cross_entropy_with_logits(p.input, p.target, {.weight = Tensor::ones({4, 2, 3}, device())}),
               "weight has shape [4, 2, 3] but expected a shape that broadcasts to input's [2, 3]");
  EXPECT_ERROR(
      nn::binary_cross_entropy_with_logits(p.input, p.target, {.weight = Tensor::ones({3}).set_requires_grad(true)}),
      device().is_cuda() ? "weight is on cpu:0 but input is on cuda:0" : "weight requires grad");
  EXPECT_ERROR(nn::mse_loss(p.input, p.target, static_cast<Reduction>(7)),
               "nn::mse_loss: got reduction 7 but expected Reduction::None, Mean or Sum");
  EXPECT_ERROR(nn::l1_loss(p.input, p.target, static_cast<Reduction>(-1)), "got reduction -1");
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(ElementwiseLoss);

}  // namespace
}  // namespace tandem
