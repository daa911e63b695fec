// nn::utils::clip_grad_norm_ (and core's total_norm / clip_by_norm_ beneath it) against float64 references, on
// every device: 2-, 1-, 3- and infinity-norms, large gradients (multi-block reductions on a GPU), the clamp at 1,
// skipped parameters, several devices, non-finite norms, errors.
#include <cmath>
#include <limits>

#include "support/test_support.h"

namespace tandem {
namespace {

using nn::utils::clip_grad_norm_;
using testing::expect_values;
using testing::to_double;

constexpr double kInf = std::numeric_limits<double>::infinity();

Tensor parameter_with_grad(const std::vector<float>& grad, Device device) {
  Tensor p = Tensor::zeros({static_cast<int64_t>(grad.size())}, device).set_requires_grad(true);
  p.set_grad(Tensor::from_vector(grad, p.shape(), device));
  return p;
}

// The norm of all elements together, in double.
double reference_norm(const std::vector<std::vector<double>>& grads, double ord) {
  double total = 0.0;
  for (const auto& grad : grads) {
    for (double g : grad) total = std::isinf(ord) ? std::max(total, std::abs(g)) : total + std::pow(std::abs(g), ord);
  }
  return std::isinf(ord) ? total : std::pow(total, 1.0 / ord);
}

class ClipGradNormTest : public testing::EveryDevice {};

TEST_P(ClipGradNormTest, ScalesEveryGradientByMaxNormOverTheTotal) {
  Tensor a = parameter_with_grad({3.0f, 4.0f}, device());  // norm 5
  Tensor b = parameter_with_grad({12.0f}, device());       // norm 12; together 13
  const Tensor total = clip_grad_norm_({a, b}, 6.5);
  EXPECT_EQ(total.shape(), Shape{});
  EXPECT_EQ(total.device(), device());
  EXPECT_FLOAT_EQ(total.item(), 13.0f);
  const double factor = 6.5 / (13.0 + 1e-6);
  expect_values(a.grad(), {3 * factor, 4 * factor}, {2}, 1e-6, 0);
  expect_values(b.grad(), {12 * factor}, {1}, 1e-6, 0);
}

TEST_P(ClipGradNormTest, GradientsWithinMaxNormAreUnchanged) {
  Tensor a = parameter_with_grad({3.0f, -4.0f}, device());
  EXPECT_FLOAT_EQ(clip_grad_norm_({a}, 5.0).item(), 5.0f);  // the factor 5 / (5 + 1e-6) < 1 still applies
  expect_values(a.grad(), {3 * 5 / (5 + 1e-6), -4 * 5 / (5 + 1e-6)}, {2}, 1e-6, 0);
  const std::vector<float> before = a.grad().to_vector();
  EXPECT_FLOAT_EQ(clip_grad_norm_({a}, 100.0).item(), 5.0f);
  EXPECT_EQ(a.grad().to_vector(), before);  // the factor is clamped to 1
}

TEST_P(ClipGradNormTest, NormsOfEveryOrderMatchTheReference) {
  // 70,000 + 3 elements: several blocks of partial results on a GPU.
  const std::vector<double> orders = {2.0, 1.0, 3.0, 0.5, kInf};
  for (double ord : orders) {
    const Tensor big_grad = Tensor::randn({70'000}, device());
    Tensor big = Tensor::zeros({70'000}, device()).set_requires_grad(true);
    big.set_grad(big_grad);
    Tensor small = parameter_with_grad({-9.5f, 0.25f, 2.0f}, device());
    const std::vector<std::vector<double>> grads = {to_double(big_grad), {-9.5, 0.25, 2.0}};
    const double expected = reference_norm(grads, ord);
    const double max_norm = expected / 4;
    const Tensor total = clip_grad_norm_({big, small}, max_norm, ord);
    EXPECT_NEAR(total.item(), expected, 1e-5 * expected) << "ord " << ord;
    const double factor = max_norm / (static_cast<double>(total.item()) + 1e-6);
    expect_values(small.grad(), {-9.5 * factor, 0.25 * factor, 2.0 * factor}, {3}, 1e-6, 0);
  }
}

TEST_P(ClipGradNormTest, ParametersWithoutGradientsAreSkipped) {
  Tensor with = parameter_with_grad({0.0f, 6.0f, 8.0f}, device());
  Tensor without = Tensor::ones({4}, device()).set_requires_grad(true);
  EXPECT_FLOAT_EQ(clip_grad_norm_({without, with}, 1.0).item(), 10.0f);
  EXPECT_FALSE(without.grad().defined());
  const Tensor none = clip_grad_norm_({without}, 1.0);
  EXPECT_EQ(none.device(), Device::cpu());
  EXPECT_EQ(none.item(), 0.0f);
  EXPECT_EQ(clip_grad_norm_({}, 1.0).item(), 0.0f);
}

TEST_P(ClipGradNormTest, ANonFiniteTotalPoisonsTheGradientsOrIsAnError) {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  Tensor a = parameter_with_grad({1.0f, nan}, device());
  Tensor b = parameter_with_grad({2.0f}, device());
  EXPECT_ERROR(clip_grad_norm_({a, b}, 1.0, 2.0, /*error_if_nonfinite=*/true),
               "nn::utils::clip_grad_norm_: the total norm of order 2 of the gradients is nan, so they cannot be "
               "clipped (error_if_nonfinite)");
  EXPECT_EQ(b.grad().item(), 2.0f);  // nothing was changed
  EXPECT_ERROR(clip_grad_norm_({a, b}, 1.0, kInf, true), "the total norm of order inf of the gradients is nan");
  EXPECT_TRUE(std::isnan(clip_grad_norm_({a, b}, 1.0).item()));  // as PyTorch: the gradients become NaN
  EXPECT_TRUE(std::isnan(b.grad().item()));

  Tensor huge = parameter_with_grad({3e38f, 3e38f}, device());  // the 2-norm overflows float32
  Tensor c = parameter_with_grad({2.0f}, device());
  EXPECT_TRUE(std::isinf(clip_grad_norm_({huge, c}, 1.0).item()));
  EXPECT_EQ(c.grad().item(), 0.0f);  // max_norm / inf
}

TEST_P(ClipGradNormTest, EmptyGradientsHaveNormZero) {
  Tensor empty = Tensor::zeros({0}, device()).set_requires_grad(true);
  empty.set_grad(Tensor::zeros({0}, device()));
  Tensor a = parameter_with_grad({-2.0f}, device());
  EXPECT_FLOAT_EQ(clip_grad_norm_({empty, a}, 1.0, kInf).item(), 2.0f);
  expect_values(a.grad(), {-1.0 / (1 + 5e-7)}, {1}, 1e-6, 0);
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(ClipGradNormTest);

class ClipGradNormDevicesTest : public testing::EveryDeviceSet {};

TEST_P(ClipGradNormDevicesTest, GradientsOnSeveralDevicesAreClippedTogether) {
  std::vector<Tensor> parameters;
  std::vector<std::vector<double>> grads;
  for (size_t d = 0; d < devices().size(); ++d) {
    const std::vector<float> grad = {static_cast<float>(d) + 1.0f, -2.0f * static_cast<float>(d)};
    parameters.push_back(parameter_with_grad(grad, devices()[d]));
    grads.push_back({grad.begin(), grad.end()});
  }
  const double expected = reference_norm(grads, 2.0);
  const Tensor total = clip_grad_norm_(parameters, 1.0);
  EXPECT_EQ(total.device(), devices()[0]);
  EXPECT_NEAR(total.item(), expected, 1e-6 * expected);
  for (size_t d = 0; d < devices().size(); ++d) {
    EXPECT_EQ(parameters[d].grad().device(), devices()[d]);
    const double factor = 1.0 / (expected + 1e-6);
    expect_values(parameters[d].grad(), {grads[d][0] * factor, grads[d][1] * factor}, {2}, 1e-6, 1e-7);
  }
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE_SET(ClipGradNormDevicesTest);

TEST(ClipGradNormErrors, ArgumentsAreChecked) {
  Tensor a = parameter_with_grad({1.0f}, Device::cpu());
  EXPECT_ERROR(clip_grad_norm_({a}, -1.0), "nn::utils::clip_grad_norm_: max_norm must be >= 0, got -1");
  EXPECT_ERROR(clip_grad_norm_({a}, std::nan("")), "nn::utils::clip_grad_norm_: max_norm must be >= 0, got nan");
  EXPECT_ERROR(clip_grad_norm_({a}, 1.0, 0.0),
               "nn::utils::clip_grad_norm_: norm_type must be > 0 (or infinity), got 0");
  EXPECT_ERROR(clip_grad_norm_({a, Tensor()}, 1.0), "nn::utils::clip_grad_norm_: parameter 1 is undefined");
  EXPECT_EQ(a.grad().item(), 1.0f);

  EXPECT_ERROR(total_norm({}, 2.0), "total_norm: got no tensors");
  EXPECT_ERROR(total_norm({a.grad()}, -1.0), "total_norm: ord must be > 0 (or infinity), got -1");
  EXPECT_ERROR(total_norm({a.grad(), Tensor()}, 2.0), "total_norm: a tensor is an undefined tensor");
  EXPECT_ERROR(clip_by_norm_(a.grad(), Tensor::ones({2}), 1.0f),
               "clip_by_norm_: norm has shape [2] but expected one element");
  EXPECT_ERROR(clip_by_norm_(a.grad(), Tensor::ones({}, Device::cpu(1)), 1.0f),
               "clip_by_norm_: expected all tensors on one device, got cpu:0 and cpu:1");
}

// Note [Gradient checks]: clipping consumes the gradients as an optimizer's step does, so it runs their checks first,
// before any gradient is scaled.
TEST(ClipGradNormErrors, GradientChecksRunBeforeAnythingIsScaled) {
  Tensor a = parameter_with_grad({30.0f}, Device::cpu());
  Tensor b = parameter_with_grad({40.0f}, Device::cpu());
  b.set_grad_check([](const std::string& user) { TANDEM_CHECK(false, user, ": b is not ready"); });
  EXPECT_ERROR(clip_grad_norm_({a, b}, 1.0), "nn::utils::clip_grad_norm_: b is not ready");
  EXPECT_EQ(a.grad().item(), 30.0f);
  b.set_grad_check(nullptr);
  EXPECT_FLOAT_EQ(clip_grad_norm_({a, b}, 1.0).item(), 50.0f);
}

TEST(ClipGradNorm, NonContiguousGradientsAreScaledInPlace) {
  Tensor p = Tensor::zeros({2, 2}).set_requires_grad(true);
  p.set_grad(Tensor::from_vector({3, 0, 4, 0}, {2, 2}).t());  // a transposed view: column 0 holds 3 and 4
  const Tensor view = p.grad();
  clip_grad_norm_({p}, 2.5);
  EXPECT_TRUE(p.grad().is_same(view));
  const double factor = 2.5 / (5 + 1e-6);
  expect_values(p.grad(), {3 * factor, 4 * factor, 0, 0}, {2, 2}, 1e-6, 0);
}

}  // namespace
}  // namespace tandem
