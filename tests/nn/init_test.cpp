// nn::init: fans and gains, the bounds and moments of every initializer, in-place writes, seeds, errors.
#include <algorithm>
#include <cmath>

#include "support/test_support.h"

namespace tandem {
namespace {

class InitTest : public testing::EveryDevice {};

struct Moments {
  double mean, std, min, max;
};

Moments moments_of(const Tensor& t) {
  const std::vector<double> v = testing::to_double(t);
  double mean = 0, sq = 0;
  for (double x : v) mean += x / static_cast<double>(v.size());
  for (double x : v) sq += (x - mean) * (x - mean) / static_cast<double>(v.size());
  return {mean, std::sqrt(sq), *std::min_element(v.begin(), v.end()), *std::max_element(v.begin(), v.end())};
}

TEST(InitFans, FansAndGainsFollowPyTorch) {
  EXPECT_EQ(nn::init::calculate_fan_in_and_fan_out(Tensor::zeros({20, 10})), (std::pair<int64_t, int64_t>{10, 20}));
  EXPECT_EQ(nn::init::calculate_fan_in_and_fan_out(Tensor::zeros({6, 4, 3, 5})),
            (std::pair<int64_t, int64_t>{60, 90}));
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("linear"), 1.0);
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("sigmoid"), 1.0);
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("conv2d"), 1.0);
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("tanh"), 5.0 / 3.0);
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("relu"), std::sqrt(2.0));
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("selu"), 0.75);
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("leaky_relu"), std::sqrt(2.0 / (1.0 + 0.01 * 0.01)));
  EXPECT_DOUBLE_EQ(nn::init::calculate_gain("leaky_relu", 0.2), std::sqrt(2.0 / 1.04));
  EXPECT_ERROR(nn::init::calculate_gain("swish"), "nn::init::calculate_gain: unknown nonlinearity 'swish'");
  EXPECT_ERROR(nn::init::calculate_fan_in_and_fan_out(Tensor::zeros({5})),
               "nn::init::calculate_fan_in_and_fan_out: the tensor has shape [5] but fans need at least 2 dimensions");
  Tensor empty = Tensor::zeros({0, 3});
  EXPECT_ERROR(nn::init::xavier_uniform_(empty),
               "nn::init::xavier_uniform_: the tensor has shape [0, 3], whose fans (3, 0) are not positive");
}

TEST_P(InitTest, DistributionsHaveTheirBoundsAndMoments) {
  manual_seed(41);
  const int64_t out = 300, in = 200;  // 60000 values: sample moments within a few percent
  Tensor w = Tensor::zeros({out, in}, device());
  const double xavier_std = std::sqrt(2.0 / (in + out));
  const double kaiming_std = std::sqrt(2.0) / std::sqrt(static_cast<double>(in));  // relu gain, fan_in

  struct Case {
    std::string name;
    std::function<void(Tensor&)> init;
    double mean, std, bound;  // bound 0: unbounded (normal)
  };
  const double sqrt3 = std::sqrt(3.0);
  const std::vector<Case> cases = {
      {"uniform_", [](Tensor& t) { nn::init::uniform_(t, -2.0, 4.0); }, 1.0, 6.0 / std::sqrt(12.0), 0},
      {"normal_", [](Tensor& t) { nn::init::normal_(t, 3.0, 0.5); }, 3.0, 0.5, 0},
      {"xavier_uniform_", [](Tensor& t) { nn::init::xavier_uniform_(t, 2.0); }, 0.0, 2 * xavier_std,
       2 * sqrt3 * xavier_std},
      {"xavier_normal_", [](Tensor& t) { nn::init::xavier_normal_(t); }, 0.0, xavier_std, 0},
      {"kaiming_uniform_", [](Tensor& t) { nn::init::kaiming_uniform_(t, 0.0, "fan_in", "relu"); }, 0.0,
       kaiming_std, sqrt3 * kaiming_std},
      {"kaiming_normal_", [](Tensor& t) { nn::init::kaiming_normal_(t, 0.0, "fan_in", "relu"); }, 0.0, kaiming_std,
       0},
      {"kaiming_normal_ fan_out", [](Tensor& t) { nn::init::kaiming_normal_(t, 0.0, "fan_out", "relu"); }, 0.0,
       std::sqrt(2.0) / std::sqrt(static_cast<double>(out)), 0},
      // The default leaky_relu with a = sqrt(5) is torch.nn.Linear's init: bound 1 / sqrt(fan_in).
      {"kaiming_uniform_ a=sqrt(5)", [](Tensor& t) { nn::init::kaiming_uniform_(t, std::sqrt(5.0)); }, 0.0,
       1.0 / std::sqrt(3.0 * in), 1.0 / std::sqrt(static_cast<double>(in))},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    c.init(w);
    EXPECT_EQ(w.device(), device());
    const Moments m = moments_of(w);
    EXPECT_NEAR(m.mean, c.mean, 0.03 * c.std);
    EXPECT_NEAR(m.std, c.std, 0.02 * c.std);
    if (c.bound > 0) {
      EXPECT_GE(m.min, -c.bound);
      EXPECT_LT(m.max, c.bound);
      EXPECT_GT(m.max, 0.99 * c.bound);  // the whole range is used
    }
  }
}

TEST_P(InitTest, WritesInPlaceKeepingTheParameter) {
  manual_seed(42);
  nn::Linear fc(4, 3, true, device());
  const Tensor handle = fc.weight;
  nn::init::constant_(fc.weight, 0.25);
  nn::init::zeros_(fc.bias);
  EXPECT_TRUE(fc.weight.requires_grad());
  EXPECT_TRUE(fc.weight.is_leaf());
  testing::expect_values(handle, std::vector<double>(12, 0.25), {3, 4});
  testing::expect_values(fc.bias, {0, 0, 0}, {3});
  nn::init::ones_(fc.bias);
  testing::expect_values(fc.bias, {1, 1, 1}, {3});
  // A seed gives the same values on every device.
  manual_seed(9);
  nn::init::xavier_normal_(fc.weight);
  Tensor on_cpu = Tensor::zeros({3, 4});
  manual_seed(9);
  nn::init::xavier_normal_(on_cpu);
  EXPECT_EQ(fc.weight.to_vector(), on_cpu.to_vector());
}

TEST_P(InitTest, Errors) {
  Tensor w = Tensor::zeros({3, 4}, device());
  Tensor labels = Tensor::zeros({3, 4}, DType::Int64, device());
  Tensor undefined;
  EXPECT_ERROR(nn::init::uniform_(labels), "nn::init::uniform_: the tensor is int64 but expected a floating point");
  EXPECT_ERROR(nn::init::zeros_(undefined), "nn::init::constant_: the tensor is undefined");
  EXPECT_ERROR(nn::init::uniform_(w, 1.0, -1.0), "nn::init::uniform_: the bounds are [1, -1) but expected low <= high");
  EXPECT_ERROR(nn::init::normal_(w, 0.0, -1.0), "nn::init::normal_: std is -1 but expected a non-negative number");
  EXPECT_ERROR(nn::init::kaiming_uniform_(w, 0.0, "fan_avg"),
               "nn::init::kaiming_uniform_: mode is 'fan_avg' but expected 'fan_in' or 'fan_out'");
  EXPECT_ERROR(nn::init::kaiming_normal_(w, 0.0, "fan_in", "swish"), "unknown nonlinearity 'swish'");
  Tensor bias = Tensor::zeros({4}, device());
  EXPECT_ERROR(nn::init::xavier_normal_(bias), "nn::init::xavier_normal_: the tensor has shape [4]");
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(InitTest);

}  // namespace
}  // namespace tandem
