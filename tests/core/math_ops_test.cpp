// The elementwise math, scalar and broadcasting arithmetic, comparisons and where against float64 references
// computed here, on every device.
#include <cmath>
#include <functional>
#include <limits>

#include "support/test_support.h"

namespace tandem {
namespace {

using testing::expect_values;
using testing::to_double;

class MathOpsTest : public testing::EveryDevice {
 protected:
  Tensor values(const std::vector<float>& v, const Shape& shape) { return Tensor::from_vector(v, shape, device()); }
};

std::vector<double> map(const std::vector<double>& x, const std::function<double(double)>& f) {
  std::vector<double> out;
  for (double v : x) out.push_back(f(v));
  return out;
}

TEST_P(MathOpsTest, UnaryMatchesFloat64) {
  manual_seed(21);
  // A transposed view, so that the kernels read a non-contiguous input.
  const Tensor x = Tensor::randn({4, 3}, device()).t();
  const Tensor positive = Tensor::rand({3, 4}, device()) + 0.1f;
  const auto X = to_double(x), P = to_double(positive);
  const double kSqrtHalf = std::sqrt(0.5);
  expect_values(exp(x), map(X, [](double v) { return std::exp(v); }), {3, 4});
  expect_values(log(positive), map(P, [](double v) { return std::log(v); }), {3, 4});
  expect_values(sqrt(positive), map(P, [](double v) { return std::sqrt(v); }), {3, 4});
  expect_values(rsqrt(positive), map(P, [](double v) { return 1 / std::sqrt(v); }), {3, 4});
  expect_values(pow(positive, 1.5f), map(P, [](double v) { return std::pow(v, 1.5); }), {3, 4});
  expect_values(pow(x, 2.0f), map(X, [](double v) { return v * v; }), {3, 4});
  expect_values(abs(x), map(X, [](double v) { return std::abs(v); }), {3, 4});
  expect_values(neg(x), map(X, [](double v) { return -v; }), {3, 4});
  expect_values(sigmoid(x), map(X, [](double v) { return 1 / (1 + std::exp(-v)); }), {3, 4});
  expect_values(sin(x), map(X, [](double v) { return std::sin(v); }), {3, 4});
  expect_values(cos(x), map(X, [](double v) { return std::cos(v); }), {3, 4});
  expect_values(gelu(x), map(X, [&](double v) { return 0.5 * v * (1 + std::erf(v * kSqrtHalf)); }), {3, 4});
  expect_values(gelu(x, "tanh"), map(X, [](double v) {
                  return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
                }),
                {3, 4});
  expect_values(clamp(x, -0.5f, 0.25f), map(X, [](double v) { return std::min(std::max(v, -0.5), 0.25); }), {3, 4});
  expect_values(clamp_min(x, 0.1f), map(X, [](double v) { return std::max(v, 0.1); }), {3, 4});
  expect_values(clamp_max(x, 0.1f), map(X, [](double v) { return std::min(v, 0.1); }), {3, 4});
}

TEST_P(MathOpsTest, UnaryEdgeValues) {
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor x = values({-inf, -100.0f, 0.0f, 100.0f, inf}, {5});
  expect_values(sigmoid(x), {0, 0, 0.5, 1, 1}, {5});
  expect_values(exp(values({-inf, 0.0f}, {2})), {0, 1}, {2});
  // Far from 0, where the argument reduction matters; and the exact points 0 and pi / 2 (as float32).
  const std::vector<float> far = {1000.0f, -12345.678f, 0.0f, static_cast<float>(M_PI / 2)};
  std::vector<double> far_sin, far_cos;
  for (float v : far) {
    far_sin.push_back(std::sin(static_cast<double>(v)));
    far_cos.push_back(std::cos(static_cast<double>(v)));
  }
  expect_values(sin(values(far, {4})), far_sin, {4}, 1e-5, 1e-6);
  expect_values(cos(values(far, {4})), far_cos, {4}, 1e-5, 1e-6);
  EXPECT_TRUE(std::isnan(sin(values({inf}, {1})).item()));
  const std::vector<float> clamped = clamp(values({std::nanf(""), -3, 3}, {3}), -1, 1).to_vector();
  EXPECT_TRUE(std::isnan(clamped[0]));
  EXPECT_EQ(clamped[1], -1.0f);
  EXPECT_EQ(clamped[2], 1.0f);
  // min > max: every element becomes max, as torch.clamp.
  expect_values(clamp(values({-5, 0, 5}, {3}), 2.0f, 1.0f), {1, 1, 1}, {3});
  EXPECT_ERROR(gelu(x, "fast"), "gelu: approximate is fast but expected \"none\" or \"tanh\"");
  EXPECT_ERROR(clamp(x, std::nanf(""), 1.0f), "clamp: bounds nan and 1 must not be NaN");
  EXPECT_ERROR(exp(Tensor()), "exp: input is an undefined tensor");
}

TEST_P(MathOpsTest, ScalarArithmetic) {
  const Tensor a = values({1, -2, 4}, {3});
  expect_values(a + 1.5f, {2.5, -0.5, 5.5}, {3});
  expect_values(1.5f + a, {2.5, -0.5, 5.5}, {3});
  expect_values(a - 1.0f, {0, -3, 3}, {3});
  expect_values(1.0f - a, {0, 3, -3}, {3});
  expect_values(a * 3.0f, {3, -6, 12}, {3});
  expect_values(2.0f / a, {2, -1, 0.5}, {3});
  expect_values(a / 2.0f, {0.5, -1, 2}, {3});
}

// Reference of a / b for a [2, 3, 4] and b broadcast from `b_shape` (any of the ranks up to 3).
std::vector<double> divide_reference(const std::vector<double>& a, const std::vector<double>& b, const Shape& b_shape) {
  Shape full(3 - b_shape.size(), 1);
  full.insert(full.end(), b_shape.begin(), b_shape.end());
  std::vector<double> out;
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 4; ++k) {
        const int64_t bi = (full[0] == 1 ? 0 : i) * full[1] * full[2] + (full[1] == 1 ? 0 : j) * full[2] +
                           (full[2] == 1 ? 0 : k);
        out.push_back(a[(i * 3 + j) * 4 + k] / b[bi]);
      }
  return out;
}

TEST_P(MathOpsTest, DivisionBroadcasts) {
  manual_seed(22);
  const Tensor a = Tensor::randn({2, 3, 4}, device());
  const auto A = to_double(a);
  for (const Shape& b_shape : std::vector<Shape>{{}, {4}, {3, 1}, {2, 1, 4}, {2, 3, 4}}) {
    SCOPED_TRACE(to_string(b_shape));
    const Tensor b = Tensor::rand(b_shape, device()) + 0.5f;
    expect_values(a / b, divide_reference(A, to_double(b), b_shape), {2, 3, 4});
  }
  EXPECT_ERROR(a / Tensor::ones({3}, device()), "div: shapes [2, 3, 4] and [3] cannot be broadcast together");
}

TEST_P(MathOpsTest, PowOfTensors) {
  const Tensor base = values({0.5f, 2.0f, 3.0f, 4.0f}, {2, 2});
  const Tensor exponent = values({2.0f, -1.0f}, {2});
  expect_values(pow(base, exponent), {0.25, 0.5, 9, 0.25}, {2, 2});
}

TEST_P(MathOpsTest, ComparisonsAreMasks) {
  const Tensor a = values({1, 2, 3, std::nanf("")}, {4});
  const Tensor b = values({2}, {1});
  expect_values(eq(a, b), {0, 1, 0, 0}, {4});
  expect_values(ne(a, b), {1, 0, 1, 1}, {4});
  expect_values(lt(a, b), {1, 0, 0, 0}, {4});
  expect_values(le(a, 2.0f), {1, 1, 0, 0}, {4});
  expect_values(gt(a, 2.0f), {0, 0, 1, 0}, {4});
  expect_values(ge(a, b), {0, 1, 1, 0}, {4});
  expect_values(a > 1.5f, {0, 1, 1, 0}, {4});
  expect_values(a <= b, {1, 1, 0, 0}, {4});
  // Column against row: [2, 1] with [3] gives [2, 3].
  expect_values(lt(values({1, 2}, {2, 1}), values({0, 1.5f, 3}, {3})), {0, 1, 1, 0, 0, 1}, {2, 3});
  const Tensor x = Tensor::ones({2}, device()).set_requires_grad();
  EXPECT_FALSE(gt(x, 0.0f).requires_grad());
  EXPECT_ERROR(eq(values({1, 2}, {2}), values({1, 2, 3}, {3})), "eq: shapes [2] and [3] cannot be broadcast");
}

TEST_P(MathOpsTest, WhereSelectsAndBroadcasts) {
  const Tensor condition = values({1, 0, 0, 1, 1, 0}, {2, 3});
  const Tensor a = values({10, 20, 30}, {3});
  const Tensor b = values({-1}, {});
  expect_values(where(condition, a, b), {10, -1, -1, 10, 20, -1}, {2, 3});
  // Gradients go to the selected side only, summed over the broadcast dims.
  const Tensor ga = a.detach().set_requires_grad(), gb = Tensor::scalar(-1, device()).set_requires_grad();
  sum(where(condition, ga, gb)).backward();
  expect_values(ga.grad(), {2, 1, 0}, {3});
  expect_values(gb.grad(), {3}, {});
  EXPECT_ERROR(where(values({1, 0}, {2}), a, b), "where: shapes [2] and [3] cannot be broadcast together");
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(MathOpsTest);

}  // namespace
}  // namespace tandem
