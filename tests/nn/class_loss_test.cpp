// cross_entropy and nll_loss: every reduction against float64 references computed here (values and gradients), with
// class weights, ignore_index and label smoothing; class-probability targets; logits of 1e4; inputs [N, C, d1, d2]
// against the same scores flattened to [N * d1 * d2, C]; gradient checks; the modules; and the errors for bad targets.
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

class ClassLoss : public testing::EveryDevice {};

using testing::kReductions;

struct Case {
  std::string name;
  std::vector<int64_t> targets;
  std::vector<double> weight;  // empty: none
  int64_t ignore_index = -100;
  double label_smoothing = 0.0;
};

// Each row's loss (0 for ignored rows), the mean's divisor, and the gradient of the mean with respect to the logits.
struct Reference {
  std::vector<double> rows;
  double divisor = 0.0;
  std::vector<double> grad_of_mean;
};

std::vector<double> log_softmax_rows(const std::vector<double>& x, int64_t n, int64_t c) {
  std::vector<double> out(x.size());
  for (int64_t i = 0; i < n; ++i) {
    double m = -std::numeric_limits<double>::infinity();
    for (int64_t k = 0; k < c; ++k) m = std::max(m, x[i * c + k]);
    double total = 0.0;
    for (int64_t k = 0; k < c; ++k) total += std::exp(x[i * c + k] - m);
    for (int64_t k = 0; k < c; ++k) out[i * c + k] = x[i * c + k] - m - std::log(total);
  }
  return out;
}

// PyTorch's cross_entropy in float64: (1 - eps) w_t (-logp_t) + eps / C sum_k w_k (-logp_k) per row.
Reference cross_entropy_reference(const std::vector<double>& logits, int64_t n, int64_t c, const Case& k) {
  const std::vector<double> logp = log_softmax_rows(logits, n, c);
  auto w = [&](int64_t cls) { return k.weight.empty() ? 1.0 : k.weight[cls]; };
  double weight_sum = 0.0;
  for (int64_t cls = 0; cls < c; ++cls) weight_sum += w(cls);
  Reference r;
  r.rows.assign(n, 0.0);
  r.grad_of_mean.assign(n * c, 0.0);
  const double eps = k.label_smoothing;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t t = k.targets[i];
    if (t == k.ignore_index) continue;
    double smooth = 0.0;
    for (int64_t cls = 0; cls < c; ++cls) smooth -= w(cls) * logp[i * c + cls];
    r.rows[i] = (1 - eps) * w(t) * -logp[i * c + t] + eps / c * smooth;
    r.divisor += w(t);
    for (int64_t cls = 0; cls < c; ++cls) {
      const double p = std::exp(logp[i * c + cls]);
      r.grad_of_mean[i * c + cls] =
          (1 - eps) * w(t) * (p - (cls == t ? 1.0 : 0.0)) + eps / c * (p * weight_sum - w(cls));
    }
  }
  for (double& g : r.grad_of_mean) g /= r.divisor;
  return r;
}

std::vector<double> reduced(const Reference& r, Reduction reduction) {
  if (reduction == Reduction::None) return r.rows;
  double total = 0.0;
  for (double v : r.rows) total += v;
  return {reduction == Reduction::Sum ? total : total / r.divisor};
}

Shape reduced_shape(int64_t n, Reduction reduction) { return reduction == Reduction::None ? Shape{n} : Shape{}; }

Tensor labels(const std::vector<int64_t>& values, Device device) {
  return Tensor::from_vector(values, {static_cast<int64_t>(values.size())}, device);
}

nn::CrossEntropyLossOptions options_of(const Case& k, Reduction reduction, Device device) {
  return {.weight = k.weight.empty() ? Tensor()
                                     : Tensor::from_vector(std::vector<float>(k.weight.begin(), k.weight.end()),
                                                           {static_cast<int64_t>(k.weight.size())}, device),
          .ignore_index = k.ignore_index,
          .reduction = reduction,
          .label_smoothing = k.label_smoothing};
}

const std::vector<Case>& cases() {
  static const std::vector<Case> all = {
      {.name = "plain", .targets = {2, 0, 3, 1, 3}},
      {.name = "ignored", .targets = {2, -100, 3, 1, -100}},
      {.name = "ignore_index 1", .targets = {2, 1, 3, 1, 0}, .ignore_index = 1},
      {.name = "weights", .targets = {2, 0, 3, 1, 3}, .weight = {0.5, 2.0, 1.0, 0.25}},
      {.name = "smoothing", .targets = {2, 0, 3, 1, 3}, .label_smoothing = 0.1},
      {.name = "all options",
       .targets = {2, 0, 3, 1, 3},
       .weight = {0.5, 2.0, 1.0, 0.25},
       .ignore_index = 3,
       .label_smoothing = 0.25},
  };
  return all;
}

void expect_cross_entropy_matches(const Tensor& logits, const Case& k, double rtol, double atol) {
  const int64_t n = logits.size(0), c = logits.size(1);
  const Reference ref = cross_entropy_reference(to_double(logits), n, c, k);
  const Tensor target = labels(k.targets, logits.device());
  for (Reduction r : kReductions) {
    SCOPED_TRACE(k.name + ", reduction " + nn::reduction_name(r));
    const Tensor x = logits.detach().set_requires_grad(true);
    const Tensor loss = nn::cross_entropy(x, target, options_of(k, r, logits.device()));
    expect_values(loss, reduced(ref, r), reduced_shape(n, r), rtol, atol);
    if (r == Reduction::Mean) {
      loss.backward();
      expect_values(x.grad(), ref.grad_of_mean, {n, c}, rtol, 1e-6);
    }
  }
}

TEST_P(ClassLoss, CrossEntropyMatchesFloat64ForEveryOptionAndReduction) {
  manual_seed(11);
  const Tensor logits = Tensor::randn({5, 4}, device()) * 2.0f;
  for (const Case& k : cases()) expect_cross_entropy_matches(logits, k, 1e-5, 1e-6);
}

TEST_P(ClassLoss, CrossEntropyIsStableForLogitsOf1e4) {
  manual_seed(12);
  const Tensor logits = Tensor::randn({5, 4}, device()) * 1e4f;
  for (const Case& k : cases()) expect_cross_entropy_matches(logits, k, 1e-5, 1e-6);
  // A row far from its target costs the gap to the largest logit, with no overflow.
  const Tensor wide = Tensor::from_vector({1e4f, -1e4f, 0.0f, 3e4f}, {2, 2}, device());
  expect_values(nn::cross_entropy(wide, labels({1, 0}, device()), {.reduction = Reduction::None}), {2e4, 3e4}, {2});
}

TEST_P(ClassLoss, NLLLossMatchesFloat64AndEqualsCrossEntropyOnLogSoftmax) {
  manual_seed(13);
  const Tensor logits = Tensor::randn({5, 4}, device());
  const Tensor log_probs = log_softmax(logits, 1);
  for (const Case& k : cases()) {
    if (k.label_smoothing != 0.0) continue;
    const Reference ref = cross_entropy_reference(to_double(logits), 5, 4, k);
    const Tensor target = labels(k.targets, device());
    for (Reduction r : kReductions) {
      SCOPED_TRACE(k.name + ", reduction " + nn::reduction_name(r));
      const nn::CrossEntropyLossOptions o = options_of(k, r, device());
      const nn::NLLLossOptions options{.weight = o.weight, .ignore_index = k.ignore_index, .reduction = r};
      expect_values(nn::nll_loss(log_probs, target, options), reduced(ref, r), reduced_shape(5, r));
    }
  }
  // nll_loss takes any scores: the row loss is -weight[t] * input[i, t].
  const Tensor scores = Tensor::from_vector({1.0f, -2.0f, 3.0f, 0.5f}, {2, 2}, device());
  expect_values(
      nn::nll_loss(scores, labels({1, 0}, device()),
                   {.weight = Tensor::from_vector({2.0f, 4.0f}, {2}, device()), .reduction = Reduction::None}),
      {8.0, -6.0}, {2});
}

TEST_P(ClassLoss, ProbabilityTargetsMatchFloat64) {
  manual_seed(14);
  const Tensor logits = Tensor::randn({3, 4}, device());
  const Tensor q = softmax(Tensor::randn({3, 4}, device()), 1);
  const std::vector<double> weight = {0.5, 2.0, 1.0, 0.25};
  const Tensor weight_tensor = Tensor::from_vector({0.5f, 2.0f, 1.0f, 0.25f}, {4}, device());
  const std::vector<double> logp = log_softmax_rows(to_double(logits), 3, 4), qs = to_double(q);
  for (double eps : {0.0, 0.2})
    for (bool weighted : {false, true}) {
      Reference ref;
      ref.divisor = 3.0;
      for (int64_t i = 0; i < 3; ++i) {
        double row = 0.0;
        for (int64_t c = 0; c < 4; ++c)
          row -= (weighted ? weight[c] : 1.0) * ((1 - eps) * qs[i * 4 + c] + eps / 4) * logp[i * 4 + c];
        ref.rows.push_back(row);
      }
      for (Reduction r : kReductions) {
        SCOPED_TRACE(std::string(nn::reduction_name(r)) + " eps " + std::to_string(eps) +
                     (weighted ? " weighted" : ""));
        const Tensor loss = nn::cross_entropy(
            logits, q, {.weight = weighted ? weight_tensor : Tensor(), .reduction = r, .label_smoothing = eps});
        expect_values(loss, reduced(ref, r), reduced_shape(3, r));
      }
    }
}

// Gradient checks of cross_entropy and nll_loss in `logits` against k's class-index targets (of target_shape), with
// k's options and every reduction.
void gradcheck_class_index_losses(const Tensor& logits, const Shape& target_shape, const Case& k) {
  const Tensor target = Tensor::from_vector(k.targets, target_shape, logits.device());
  for (Reduction r : kReductions) {
    SCOPED_TRACE(k.name + ", reduction " + nn::reduction_name(r));
    const nn::CrossEntropyLossOptions options = options_of(k, r, logits.device());
    testing::gradcheck([&](const std::vector<Tensor>& in) { return nn::cross_entropy(in[0], target, options); },
                       {logits});
    testing::gradcheck(
        [&](const std::vector<Tensor>& in) {
          return nn::nll_loss(in[0], target,
                              {.weight = options.weight, .ignore_index = k.ignore_index, .reduction = r});
        },
        {logits});
  }
}

TEST_P(ClassLoss, GradientsPassGradcheck) {
  manual_seed(15);
  const Tensor logits = Tensor::randn({5, 4}, device()).set_requires_grad(true);
  for (const Case& k : cases()) gradcheck_class_index_losses(logits, {5}, k);
  const Tensor q = softmax(Tensor::randn({5, 4}, device()), 1).detach().set_requires_grad(true);
  for (Reduction r : kReductions)
    testing::gradcheck(
        [r](const std::vector<Tensor>& in) {
          return nn::cross_entropy(in[0], in[1], {.reduction = r, .label_smoothing = 0.1});
        },
        {logits, q});
}

// Inputs [N, C, d1, d2] with targets [N, d1, d2] against the float64 reference of the same scores with C moved last
// and flattened to [N * d1 * d2, C] (a row per target element, in the target's row-major order), for every option and
// reduction: values, the gradient of the mean, and gradchecks.
constexpr int64_t kN = 2, kC = 4, kD1 = 3, kD2 = 2, kElements = kN * kD1 * kD2;

// x [N, C, D1, D2] (row-major) as rows of C: row (n, a, b) holds x[n, :, a, b].
std::vector<double> classes_last(const std::vector<double>& x) {
  std::vector<double> rows;
  for (int64_t n = 0; n < kN; ++n)
    for (int64_t a = 0; a < kD1; ++a)
      for (int64_t b = 0; b < kD2; ++b)
        for (int64_t c = 0; c < kC; ++c) rows.push_back(x[((n * kC + c) * kD1 + a) * kD2 + b]);
  return rows;
}

// The inverse of classes_last.
std::vector<double> classes_second(const std::vector<double>& rows) {
  std::vector<double> x(rows.size());
  for (int64_t n = 0; n < kN; ++n)
    for (int64_t a = 0; a < kD1; ++a)
      for (int64_t b = 0; b < kD2; ++b)
        for (int64_t c = 0; c < kC; ++c)
          x[((n * kC + c) * kD1 + a) * kD2 + b] = rows[((n * kD1 + a) * kD2 + b) * kC + c];
  return x;
}

// k with its targets repeated to fill the kElements target elements.
Case spatial(const Case& k) {
  Case spread = k;
  spread.targets.clear();
  for (int64_t i = 0; i < kElements; ++i) spread.targets.push_back(k.targets[i % k.targets.size()]);
  return spread;
}

TEST_P(ClassLoss, SpatialInputsMatchTheFlattenedFloat64Reference) {
  manual_seed(17);
  const Tensor logits = Tensor::randn({kN, kC, kD1, kD2}, device()) * 2.0f;
  const std::vector<double> rows = classes_last(to_double(logits));
  const Shape target_shape{kN, kD1, kD2};
  for (const Case& original : cases()) {
    const Case k = spatial(original);
    const Reference ref = cross_entropy_reference(rows, kElements, kC, k);
    const Tensor target = Tensor::from_vector(k.targets, target_shape, device());
    for (Reduction r : kReductions) {
      SCOPED_TRACE(k.name + ", reduction " + nn::reduction_name(r));
      const Tensor x = logits.detach().set_requires_grad(true);
      const Tensor loss = nn::cross_entropy(x, target, options_of(k, r, device()));
      expect_values(loss, reduced(ref, r), r == Reduction::None ? target_shape : Shape{});
      if (r == Reduction::Mean) {
        loss.backward();
        expect_values(x.grad(), classes_second(ref.grad_of_mean), logits.shape(), 1e-5, 1e-6);
      }
      if (k.label_smoothing != 0.0) continue;
      const nn::CrossEntropyLossOptions o = options_of(k, r, device());
      expect_values(nn::nll_loss(log_softmax(logits, 1), target,
                                 {.weight = o.weight, .ignore_index = k.ignore_index, .reduction = r}),
                    reduced(ref, r), r == Reduction::None ? target_shape : Shape{});
    }
  }
}

TEST_P(ClassLoss, SpatialProbabilityTargetsMatchTheFlattenedFloat64Reference) {
  manual_seed(18);
  const Tensor logits = Tensor::randn({kN, kC, kD1, kD2}, device());
  const Tensor q = softmax(Tensor::randn({kN, kC, kD1, kD2}, device()), 1);
  const std::vector<double> logp = log_softmax_rows(classes_last(to_double(logits)), kElements, kC);
  const std::vector<double> qs = classes_last(to_double(q));
  const double eps = 0.2;
  Reference ref;
  ref.divisor = static_cast<double>(kElements);
  for (int64_t i = 0; i < kElements; ++i) {
    double loss = 0.0;
    for (int64_t c = 0; c < kC; ++c) loss -= ((1 - eps) * qs[i * kC + c] + eps / kC) * logp[i * kC + c];
    ref.rows.push_back(loss);
  }
  for (Reduction r : kReductions) {
    SCOPED_TRACE(nn::reduction_name(r));
    expect_values(nn::cross_entropy(logits, q, {.reduction = r, .label_smoothing = eps}), reduced(ref, r),
                  r == Reduction::None ? Shape{kN, kD1, kD2} : Shape{});
  }
}

TEST_P(ClassLoss, SpatialGradientsPassGradcheck) {
  manual_seed(19);
  const Tensor logits = Tensor::randn({kN, kC, kD1, kD2}, device()).set_requires_grad(true);
  for (const Case& k : cases()) gradcheck_class_index_losses(logits, {kN, kD1, kD2}, spatial(k));
  const Tensor q = softmax(Tensor::randn({kN, kC, kD1, kD2}, device()), 1).detach().set_requires_grad(true);
  testing::gradcheck(
      [](const std::vector<Tensor>& in) { return nn::cross_entropy(in[0], in[1], {.label_smoothing = 0.1}); },
      {logits, q});
}

TEST_P(ClassLoss, EveryRowIgnoredGivesNaNMeanAndZeroSum) {
  const Tensor logits = Tensor::from_vector({1.0f, 2.0f, 3.0f, 4.0f}, {2, 2}, device()).set_requires_grad(true);
  const Tensor target = labels({-100, -100}, device());
  EXPECT_TRUE(std::isnan(nn::cross_entropy(logits, target).item()));
  const Tensor sum = nn::cross_entropy(logits, target, {.reduction = Reduction::Sum, .label_smoothing = 0.3});
  EXPECT_EQ(sum.item(), 0.0f);
  sum.backward();
  expect_values(logits.grad(), {0, 0, 0, 0}, {2, 2}, 0, 0);
  // An ignored row stays 0 even where its logits hold -inf.
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor masked = Tensor::from_vector({-inf, 1.0f, 0.0f, 0.0f}, {2, 2}, device());
  expect_values(nn::cross_entropy(masked, labels({-100, 1}, device()), {.reduction = Reduction::None}),
                {0.0, std::log(2.0)}, {2});
}

TEST_P(ClassLoss, ModulesHoldTheirOptionsAndServeEveryDevice) {
  manual_seed(16);
  const Tensor logits = Tensor::randn({5, 4}, device());
  const Tensor target = labels({2, 0, 3, 1, 3}, device());
  const nn::CrossEntropyLossOptions options{
      .weight = Tensor::from_vector({0.5f, 2.0f, 1.0f, 0.25f}, {4}), .ignore_index = 1, .label_smoothing = 0.1};
  nn::CrossEntropyLoss loss(options);  // its weight on cpu:0, used on device()
  nn::CrossEntropyLossOptions here = options;
  here.weight = options.weight.to(device());
  expect_close(loss(logits, target), nn::cross_entropy(logits, target, here));
  EXPECT_EQ(loss.extra_repr(), "reduction=mean, ignore_index=1, label_smoothing=0.1, weight=[4]");
  nn::NLLLoss nll({.reduction = Reduction::Sum});
  expect_close(nll(log_softmax(logits, 1), target), nn::cross_entropy(logits, target, {.reduction = Reduction::Sum}));
  EXPECT_EQ(nll.extra_repr(), "reduction=sum, ignore_index=-100, weight=none");
  EXPECT_ERROR(loss.forward_all({logits, target, target}), "3");
  // As the trainers' loss type, with the default options.
  const std::function<Tensor(const Tensor&, const Tensor&)> as_function = nn::cross_entropy;
  expect_close(as_function(logits, target), nn::cross_entropy(logits, target));
}

TEST_P(ClassLoss, BadTargetsAndOptionsAreErrors) {
  const Tensor logits = Tensor::zeros({3, 4}, device());
  EXPECT_ERROR(nn::cross_entropy(logits, labels({1, 4, 0}, device())),
               "nn::cross_entropy: target[1] is 4 but expected a class index in [0, 4) or ignore_index -100");
  EXPECT_ERROR(nn::nll_loss(logits, labels({1, 2, -3}, device())),
               "nn::nll_loss: target[2] is -3 but expected a class index in [0, 4) or ignore_index -100");
  EXPECT_ERROR(nn::cross_entropy(logits, labels({1, -100, 0}, device()), {.ignore_index = 0}),
               "target[1] is -100 but expected a class index in [0, 4) or ignore_index 0");
  // class indices pass through float32 on the device (Note [Class targets] in nn/src/loss_class.cpp)
  EXPECT_ERROR(nn::cross_entropy(Tensor::zeros({1, (int64_t{1} << 24) + 1}, device()), labels({0}, device())),
               "nn::cross_entropy: input has 16777217 classes but class-index targets take at most 16777216 (2^24)");
  EXPECT_ERROR(nn::cross_entropy(logits, Tensor::from_vector({1.0f, 2.0f, 0.0f}, {3}, device())),
               "nn::cross_entropy: target is float32 but expected int64 class indices (convert with "
               ".to(DType::Int64))");
  EXPECT_ERROR(nn::cross_entropy(logits, labels({1, 2}, device())),
               "nn::cross_entropy: target has shape [2] but expected [3] (input's shape [3, 4] without its class "
               "dimension 1)");
  EXPECT_ERROR(nn::cross_entropy(Tensor::zeros({4}, device()), labels({1}, device())),
               "nn::cross_entropy: input has shape [4] but expected [N, C] or [N, C, d1, ...]");
  const Tensor spatial = Tensor::zeros({2, 3, 5}, device());
  EXPECT_ERROR(nn::cross_entropy(spatial, Tensor::zeros({2, 4}, DType::Int64, device())),
               "nn::cross_entropy: target has shape [2, 4] but expected [2, 5] (input's shape [2, 3, 5] without its "
               "class dimension 1)");
  std::vector<int64_t> spatial_labels(10, 0);
  spatial_labels[8] = 3;
  EXPECT_ERROR(nn::nll_loss(spatial, Tensor::from_vector(spatial_labels, {2, 5}, device())),
               "nn::nll_loss: target[1, 3] is 3 but expected a class index in [0, 3) or ignore_index -100");
  EXPECT_ERROR(nn::cross_entropy(logits.to(DType::BFloat16), labels({1, 2, 0}, device())),
               "nn::cross_entropy: input is bfloat16 but expected float32");
  EXPECT_ERROR(nn::cross_entropy(logits, labels({1, 2, 0}, device()), {.weight = Tensor::ones({3}, device())}),
               "nn::cross_entropy: weight has shape [3] but expected [4] (one weight per class)");
  const Device elsewhere = device().is_cuda() ? Device::cpu(0) : Device::cpu(1);
  EXPECT_ERROR(nn::nll_loss(logits, labels({1, 2, 0}, device()), {.weight = Tensor::ones({4}, elsewhere)}),
               "nn::nll_loss: weight is on " + elsewhere.str() + " but input is on " + device().str());
  EXPECT_ERROR(nn::cross_entropy(logits, labels({1, 2, 0}, elsewhere)), "nn::cross_entropy: target is on ");
  EXPECT_ERROR(nn::cross_entropy(logits, labels({1, 2, 0}, device()),
                                 {.weight = Tensor::ones({4}, device()).set_requires_grad(true)}),
               "nn::cross_entropy: weight requires grad but expected a constant of the loss");
  EXPECT_ERROR(nn::cross_entropy(logits, labels({1, 2, 0}, device()), {.label_smoothing = 1.5}),
               "nn::cross_entropy: label_smoothing is 1.5 but expected a value in [0, 1]");
  EXPECT_ERROR(nn::cross_entropy(logits, Tensor::zeros({3, 4}, device()), {.ignore_index = 2}),
               "nn::cross_entropy: ignore_index is 2 but class-probability targets cannot be ignored");
  EXPECT_ERROR(nn::cross_entropy(logits, labels({1, 2, 0}, device()), {.reduction = static_cast<Reduction>(5)}),
               "nn::cross_entropy: got reduction 5");
  EXPECT_ERROR(nn::cross_entropy(logits, Tensor()), "nn::cross_entropy: the target is undefined");
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(ClassLoss);

}  // namespace
}  // namespace tandem
