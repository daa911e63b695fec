// A finite-difference gradient check of every op added over the seed set (math, arithmetic with broadcasting and
// scalars, where, reductions, softmax, indexing), on every device.
#include "support/test_support.h"

namespace tandem {
namespace {

using testing::gradcheck;

class OpsGradcheckTest : public testing::EveryDevice {
 protected:
  void SetUp() override {
    EveryDevice::SetUp();
    manual_seed(41);
  }
  Tensor input(const Shape& shape) { return Tensor::randn(shape, device()).set_requires_grad(); }
  // Values in [low, high): away from the points where a function or its derivative is not smooth.
  Tensor input_in(const Shape& shape, float low, float high) {
    return Tensor::uniform(shape, low, high, device()).set_requires_grad();
  }
  Tensor values(const std::vector<float>& v, const Shape& shape) { return Tensor::from_vector(v, shape, device()); }
  Tensor indices(const std::vector<int64_t>& v, const Shape& shape) { return Tensor::from_vector(v, shape, device()); }
};

TEST_P(OpsGradcheckTest, UnaryMath) {
  gradcheck([](auto& in) { return exp(in[0]); }, {input({3, 4})});
  gradcheck([](auto& in) { return log(in[0]); }, {input_in({3, 4}, 0.5f, 2.0f)});
  gradcheck([](auto& in) { return sqrt(in[0]); }, {input_in({3, 4}, 0.5f, 2.0f)});
  gradcheck([](auto& in) { return rsqrt(in[0]); }, {input_in({3, 4}, 0.5f, 2.0f)});
  gradcheck([](auto& in) { return pow(in[0], 3.0f) + pow(in[0], 2.0f); }, {input({5})});
  gradcheck([](auto& in) { return pow(in[0], -0.5f); }, {input_in({5}, 0.5f, 2.0f)});
  gradcheck([](auto& in) { return abs(in[0]); }, {values({-1.5f, -0.3f, 0.4f, 2.0f}, {4}).set_requires_grad()});
  gradcheck([](auto& in) { return neg(in[0]); }, {input({2, 3})});
  gradcheck([](auto& in) { return sigmoid(in[0]); }, {input({3, 4})});
  gradcheck([](auto& in) { return sin(in[0]); }, {input({3, 4})});
  gradcheck([](auto& in) { return cos(in[0]); }, {input({3, 4})});
  gradcheck([](auto& in) { return gelu(in[0]); }, {input({3, 4})});
  gradcheck([](auto& in) { return gelu(in[0], "tanh"); }, {input({3, 4})});
  gradcheck([](auto& in) { return clamp(in[0], -0.5f, 0.5f); },
            {values({-1.5f, -0.3f, 0.2f, 0.8f, 0.45f, -0.45f}, {6}).set_requires_grad()});
}

TEST_P(OpsGradcheckTest, ArithmeticWithScalars) {
  gradcheck([](auto& in) { return (in[0] + 2.0f) * (3.0f - in[0]) + (1.0f + in[0]) - (in[0] - 4.0f); }, {input({5})});
  gradcheck([](auto& in) { return 2.0f / in[0]; }, {input_in({5}, 0.5f, 2.0f)});
}

TEST_P(OpsGradcheckTest, DivisionAndPowBroadcast) {
  gradcheck([](auto& in) { return in[0] / in[1]; }, {input({3, 4}), input_in({4}, 0.5f, 2.0f)});
  gradcheck([](auto& in) { return in[0] / in[1]; }, {input({2, 1, 4}), input_in({3, 1}, 0.5f, 2.0f)});
  gradcheck([](auto& in) { return in[0] / in[1]; }, {input({3}), input_in({}, 0.5f, 2.0f)});
  gradcheck([](auto& in) { return pow(in[0], in[1]); }, {input_in({2, 3}, 0.5f, 2.0f), input_in({3}, -1.0f, 2.0f)});
}

TEST_P(OpsGradcheckTest, Where) {
  const Tensor condition = values({1, 0, 1, 0, 0, 1}, {2, 3});
  gradcheck([condition](auto& in) { return where(condition, in[0], in[1]); }, {input({3}), input({2, 1})});
  gradcheck([](auto& in) { return where(gt(in[0], 0.0f), in[0], in[0] * in[0]); },
            {values({-1.5f, -0.3f, 0.4f, 2.0f}, {4}).set_requires_grad()});
}

TEST_P(OpsGradcheckTest, Masks) {
  gradcheck([](auto& in) { return tril(in[0], -1); }, {input({2, 3, 4})});
  gradcheck([](auto& in) { return triu(in[0], 1); }, {input({4, 3})});
  const Tensor mask = values({1, 0, 0, 1}, {4});
  gradcheck([mask](auto& in) { return masked_fill(in[0], mask, 2.0f); }, {input({3, 4})});
}

TEST_P(OpsGradcheckTest, Reductions) {
  gradcheck([](auto& in) { return sum(in[0], {0, 2}); }, {input({2, 3, 4})});
  gradcheck([](auto& in) { return sum(in[0], {-1}, true); }, {input({2, 3})});
  gradcheck([](auto& in) { return mean(in[0], {1, 2}, true); }, {input({2, 3, 4})});
  gradcheck([](auto& in) { return var(in[0], {1}); }, {input({3, 5})});
  gradcheck([](auto& in) { return var(in[0], {0, 2}, 0.0, true); }, {input({2, 3, 4})});
  gradcheck([](auto& in) { return var(in[0]); }, {input({6})});
  gradcheck([](auto& in) { return logsumexp(in[0], {1}); }, {input({3, 4})});
  gradcheck([](auto& in) { return logsumexp(in[0], {0, 2}, true); }, {input({2, 3, 4})});
  // Distinct values (no ties within eps) so that the maxima do not move under the finite differences.
  const Tensor distinct = values({0.1f, 0.9f, -0.4f, 0.5f, -1.2f, 0.3f, 1.1f, -0.7f}, {2, 4}).set_requires_grad();
  gradcheck([](auto& in) { return std::get<0>(max(in[0], 1)); }, {distinct});
  gradcheck([](auto& in) { return std::get<0>(min(in[0], 0, true)); }, {distinct});
  gradcheck([](auto& in) { return max(in[0]) + min(in[0]); }, {distinct});
}

TEST_P(OpsGradcheckTest, Softmax) {
  gradcheck([](auto& in) { return softmax(in[0], 1); }, {input({3, 4})});
  gradcheck([](auto& in) { return softmax(in[0], 0); }, {input({3, 4})});
  gradcheck([](auto& in) { return log_softmax(in[0], -1); }, {input({3, 4})});
  gradcheck([](auto& in) { return log_softmax(in[0], 1); }, {input({2, 3, 2})});
}

TEST_P(OpsGradcheckTest, Indexing) {
  gradcheck([this](auto& in) { return index_select(in[0], 1, indices({2, 0, 2}, {3})); }, {input({2, 3})});
  gradcheck([this](auto& in) { return gather(in[0], 1, indices({1, 1, 0, 2}, {2, 2})); }, {input({3, 3})});
  gradcheck([this](auto& in) { return gather(in[0], 0, indices({2, 0, 2, 2}, {2, 2}).t()); }, {input({3, 3})});
  // Repeated indices, and a src larger than the index (its elements outside the index's shape unread: gradient 0).
  const Tensor repeated = indices({1, 1, 0, 2}, {2, 2});
  gradcheck([&](auto& in) { return scatter_add(in[0], 1, repeated, in[1]); }, {input({3, 3}), input({2, 3})});
  const Tensor row = indices({2, 0, 2}, {1, 3});
  gradcheck([&](auto& in) { return scatter_add(in[0], 0, row, in[1]); }, {input({3, 3}), input({2, 4})});
  gradcheck([](auto& in) { return stack({in[0], in[1]}, 1); }, {input({2, 3}), input({2, 3})});
  gradcheck([](auto& in) { return cat({in[0], in[1]}, -1); }, {input({2, 3}), input({2, 1})});
}

TEST_P(OpsGradcheckTest, LayerNormComposedOfOps) {
  // A layer written in tandem ops only, the way nn layers are built on them.
  gradcheck(
      [](auto& in) {
        const Tensor centered = in[0] - mean(in[0], {-1}, true);
        return centered * rsqrt(var(in[0], {-1}, false, true) + 1e-5f) * in[1] + in[2];
      },
      {input({4, 5}), input({5}), input({5})});
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(OpsGradcheckTest);

}  // namespace
}  // namespace tandem
