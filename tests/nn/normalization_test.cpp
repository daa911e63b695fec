// LayerNorm, BatchNorm1d and BatchNorm2d against float64 references computed here, by gradcheck, BatchNorm's running
// statistics over several steps against their closed form, eval mode, state_dict names, clones, and errors.
#include <cmath>

#include "support/test_support.h"

namespace tandem {
namespace {

using testing::expect_int64_values;
using testing::expect_values;
using testing::to_double;

class NormalizationTest : public testing::EveryDevice {};

// Normalizes each of `rows` groups of `width` consecutive values (population variance), then scales and shifts by
// weight[j] and bias[j] of the value's position j in its group.
std::vector<double> layer_norm_reference(const std::vector<double>& x, int64_t width, double eps,
                                         const std::vector<double>& weight, const std::vector<double>& bias) {
  std::vector<double> y(x.size());
  for (size_t start = 0; start < x.size(); start += static_cast<size_t>(width)) {
    double mean = 0, var = 0;
    for (int64_t j = 0; j < width; ++j) mean += x[start + j] / static_cast<double>(width);
    for (int64_t j = 0; j < width; ++j) var += (x[start + j] - mean) * (x[start + j] - mean) / width;
    for (int64_t j = 0; j < width; ++j) y[start + j] = (x[start + j] - mean) / std::sqrt(var + eps) * weight[j] + bias[j];
  }
  return y;
}

TEST_P(NormalizationTest, LayerNormMatchesFloat64Reference) {
  manual_seed(11);
  nn::LayerNorm norm({3, 4}, 1e-3, true, true, device());
  EXPECT_EQ(norm.named_parameters().size(), 2u);
  EXPECT_EQ(norm.weight.shape(), (Shape{3, 4}));
  // Non-trivial affine parameters, so the reference checks that they are applied elementwise.
  nn::init::normal_(norm.weight);
  nn::init::normal_(norm.bias);
  const Tensor x = Tensor::randn({2, 5, 3, 4}, device()) * 3.0f + 1.0f;
  expect_values(norm(x), layer_norm_reference(to_double(x), 12, 1e-3, to_double(norm.weight), to_double(norm.bias)),
                {2, 5, 3, 4}, 1e-4, 1e-5);

  nn::LayerNorm plain({4}, 1e-5, false, true, device());
  EXPECT_TRUE(plain.parameters().empty());
  const Tensor rows = Tensor::randn({6, 4}, device());
  expect_values(plain(rows), layer_norm_reference(to_double(rows), 4, 1e-5, {1, 1, 1, 1}, {0, 0, 0, 0}), {6, 4},
                1e-4, 1e-5);
}

TEST_P(NormalizationTest, LayerNormWithoutBiasHasAWeightOnly) {
  manual_seed(13);
  nn::LayerNorm norm({4}, 1e-5, true, /*bias=*/false, device());
  const auto named = norm.named_parameters();
  ASSERT_EQ(named.size(), 1u);
  EXPECT_EQ(named[0].first, "weight");
  EXPECT_FALSE(norm.bias.defined());
  nn::init::normal_(norm.weight);
  const Tensor x = Tensor::randn({3, 4}, device());
  expect_values(norm(x), layer_norm_reference(to_double(x), 4, 1e-5, to_double(norm.weight), {0, 0, 0, 0}), {3, 4},
                1e-4, 1e-5);
  EXPECT_NE(norm.extra_repr().find("bias=false"), std::string::npos) << norm.extra_repr();
}

TEST_P(NormalizationTest, LayerNormGradcheck) {
  manual_seed(12);
  nn::LayerNorm norm({5}, 1e-5, true, true, device());
  nn::init::normal_(norm.weight);
  nn::init::normal_(norm.bias);
  const Tensor x = Tensor::randn({3, 5}, device()).set_requires_grad();
  testing::gradcheck([&](const std::vector<Tensor>& in) { return norm(in[0]); }, {x, norm.weight, norm.bias});
}

// Per channel c of x [n, c, l] (an [N, C, H, W] tensor is [N, C, H * W] here): the values x[i][c][k] for every i, k.
std::vector<double> channel_values(const std::vector<double>& x, int64_t n, int64_t channels, int64_t length,
                                   int64_t c) {
  std::vector<double> values;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < length; ++k) values.push_back(x[(i * channels + c) * length + k]);
  return values;
}

double mean_of(const std::vector<double>& v) {
  double total = 0;
  for (double value : v) total += value;
  return total / static_cast<double>(v.size());
}

double var_of(const std::vector<double>& v, bool unbiased) {
  const double m = mean_of(v);
  double total = 0;
  for (double value : v) total += (value - m) * (value - m);
  return total / static_cast<double>(v.size() - (unbiased ? 1 : 0));
}

// Batch normalization of x [n, c, l] with the given per-channel statistics, weight and bias.
std::vector<double> batch_norm_reference(const std::vector<double>& x, int64_t n, int64_t channels, int64_t length,
                                         const std::vector<double>& mean, const std::vector<double>& var, double eps,
                                         const std::vector<double>& weight, const std::vector<double>& bias) {
  std::vector<double> y(x.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t c = 0; c < channels; ++c)
      for (int64_t k = 0; k < length; ++k) {
        const size_t at = static_cast<size_t>((i * channels + c) * length + k);
        y[at] = (x[at] - mean[c]) / std::sqrt(var[c] + eps) * weight[c] + bias[c];
      }
  return y;
}

TEST_P(NormalizationTest, BatchNormTrainingUsesBatchStatisticsAndUpdatesRunningStats) {
  manual_seed(13);
  for (const Shape& shape : {Shape{8, 3}, Shape{4, 3, 5}}) {
    const int64_t n = shape[0], channels = shape[1], length = shape.size() == 3 ? shape[2] : 1;
    nn::BatchNorm1d norm(channels, 1e-5, 0.1, true, true, device());
    nn::init::normal_(norm.weight);
    nn::init::normal_(norm.bias);
    std::vector<double> running_mean(channels, 0.0), running_var(channels, 1.0);
    for (int step = 1; step <= 4; ++step) {
      const Tensor x = Tensor::randn(shape, device()) * static_cast<float>(step) + 2.0f;
      const std::vector<double> xs = to_double(x);
      std::vector<double> batch_mean, batch_var;
      for (int64_t c = 0; c < channels; ++c) {
        const std::vector<double> values = channel_values(xs, n, channels, length, c);
        batch_mean.push_back(mean_of(values));
        batch_var.push_back(var_of(values, false));
        // PyTorch's update: the unbiased variance goes into running_var.
        running_mean[c] = 0.9 * running_mean[c] + 0.1 * batch_mean[c];
        running_var[c] = 0.9 * running_var[c] + 0.1 * var_of(values, true);
      }
      expect_values(norm(x),
                    batch_norm_reference(xs, n, channels, length, batch_mean, batch_var, 1e-5,
                                         to_double(norm.weight), to_double(norm.bias)),
                    shape, 1e-4, 1e-4);
      expect_values(norm.running_mean, running_mean, {channels}, 1e-5, 1e-5);
      expect_values(norm.running_var, running_var, {channels}, 1e-5, 1e-5);
      EXPECT_EQ(norm.num_batches_tracked.item<int64_t>(), step);
      EXPECT_FALSE(norm.running_mean.requires_grad());
    }
    // Eval normalizes with the running statistics and leaves them alone.
    norm.eval();
    const Tensor x = Tensor::randn(shape, device());
    expect_values(norm(x),
                  batch_norm_reference(to_double(x), n, channels, length, running_mean, running_var, 1e-5,
                                       to_double(norm.weight), to_double(norm.bias)),
                  shape, 1e-4, 1e-4);
    expect_values(norm.running_mean, running_mean, {channels}, 1e-5, 1e-5);
    EXPECT_EQ(norm.num_batches_tracked.item<int64_t>(), 4);
  }
}

TEST_P(NormalizationTest, BatchNormCumulativeAverageWithoutMomentum) {
  manual_seed(14);
  nn::BatchNorm1d norm(2, 1e-5, std::nullopt, false, true, device());
  std::vector<double> sum_mean(2, 0.0), sum_var(2, 0.0);
  for (int step = 1; step <= 3; ++step) {
    const Tensor x = Tensor::randn({5, 2}, device()) + static_cast<float>(step);
    const std::vector<double> xs = to_double(x);
    for (int64_t c = 0; c < 2; ++c) {
      sum_mean[c] += mean_of(channel_values(xs, 5, 2, 1, c));
      sum_var[c] += var_of(channel_values(xs, 5, 2, 1, c), true);
    }
    norm(x);
  }
  // After the first step (factor 1/1) the initial values are forgotten: the running stats are plain averages.
  expect_values(norm.running_mean, {sum_mean[0] / 3, sum_mean[1] / 3}, {2}, 1e-5, 1e-5);
  expect_values(norm.running_var, {sum_var[0] / 3, sum_var[1] / 3}, {2}, 1e-5, 1e-5);
}

TEST_P(NormalizationTest, BatchNormWithoutRunningStatsUsesBatchStatisticsInEval) {
  manual_seed(15);
  nn::BatchNorm1d norm(3, 1e-5, 0.1, false, false, device());
  EXPECT_TRUE(norm.buffers().empty());
  EXPECT_TRUE(norm.parameters().empty());
  norm.eval();
  const Tensor x = Tensor::randn({6, 3}, device());
  const std::vector<double> xs = to_double(x);
  std::vector<double> means, vars;
  for (int64_t c = 0; c < 3; ++c) {
    means.push_back(mean_of(channel_values(xs, 6, 3, 1, c)));
    vars.push_back(var_of(channel_values(xs, 6, 3, 1, c), false));
  }
  expect_values(norm(x), batch_norm_reference(xs, 6, 3, 1, means, vars, 1e-5, {1, 1, 1}, {0, 0, 0}), {6, 3}, 1e-4,
                1e-4);
}

TEST_P(NormalizationTest, BatchNormGradcheckInTrainingAndEval) {
  manual_seed(16);
  nn::BatchNorm1d norm(3, 1e-5, 0.1, true, true, device());
  nn::init::normal_(norm.weight);
  nn::init::normal_(norm.bias);
  const Tensor x = Tensor::randn({4, 3, 2}, device()).set_requires_grad();
  auto f = [&](const std::vector<Tensor>& in) { return norm(in[0]); };
  testing::gradcheck(f, {x, norm.weight, norm.bias});
  norm.eval();
  testing::gradcheck(f, {x, norm.weight, norm.bias});
}

TEST_P(NormalizationTest, ErrorsNameTheLayer) {
  EXPECT_ERROR(nn::LayerNorm(Shape{}), "nn::LayerNorm: normalized_shape is empty");
  EXPECT_ERROR(nn::LayerNorm({3, 0}), "nn::LayerNorm: normalized_shape is [3, 0] but expected positive sizes");
  EXPECT_ERROR(nn::LayerNorm({3}, -1.0), "nn::LayerNorm: eps is -1");
  nn::LayerNorm layer_norm({3, 4}, 1e-5, true, true, device());
  EXPECT_ERROR(layer_norm(Tensor::zeros({2, 4, 3}, device())),
               "nn::LayerNorm: input has shape [2, 4, 3] but expected [..., 3, 4] (normalized_shape = [3, 4])");
  EXPECT_ERROR(layer_norm(Tensor::zeros({4}, device())), "nn::LayerNorm: input has shape [4]");

  EXPECT_ERROR(nn::BatchNorm1d(0), "nn::BatchNorm1d: num_features is 0 but expected at least 1");
  EXPECT_ERROR(nn::BatchNorm1d(3, 1e-5, 1.5), "nn::BatchNorm1d: momentum is 1.5 but expected a value in [0, 1]");
  nn::BatchNorm1d batch_norm(3, 1e-5, 0.1, true, true, device());
  EXPECT_ERROR(batch_norm(Tensor::zeros({4, 2}, device())),
               "nn::BatchNorm1d: input has shape [4, 2] but expected [N, 3] or [N, 3, L] (num_features = 3)");
  EXPECT_ERROR(batch_norm(Tensor::zeros({4}, device())), "nn::BatchNorm1d: input has shape [4]");
  EXPECT_ERROR(batch_norm(Tensor::zeros({1, 3}, device())),
               "nn::BatchNorm1d: input has shape [1, 3], one value per channel, but training needs more than one");
  EXPECT_EQ(batch_norm.num_batches_tracked.item<int64_t>(), 0);
  batch_norm.eval();
  EXPECT_EQ(batch_norm(Tensor::zeros({1, 3}, device())).shape(), (Shape{1, 3}));  // eval needs no batch statistics
}

// BatchNorm2d: [N, C, H, W] is [N, C, L = H * W] for the references above.
TEST_P(NormalizationTest, BatchNorm2dTrainingAndEvalMatchFloat64Reference) {
  manual_seed(17);
  const int64_t n = 3, channels = 4, height = 5, width = 2, length = height * width;
  const Shape shape{n, channels, height, width};
  const double momentum = 0.3, eps = 1e-3;
  nn::BatchNorm2d norm(channels, eps, momentum, true, true, device());
  nn::init::normal_(norm.weight);
  nn::init::normal_(norm.bias);
  std::vector<double> running_mean(channels, 0.0), running_var(channels, 1.0);
  for (int step = 1; step <= 2; ++step) {
    const Tensor x = Tensor::randn(shape, device()) * (1.5f * static_cast<float>(step)) - 1.0f;
    const std::vector<double> xs = to_double(x);
    std::vector<double> batch_mean, batch_var;
    for (int64_t c = 0; c < channels; ++c) {
      const std::vector<double> values = channel_values(xs, n, channels, length, c);
      ASSERT_EQ(values.size(), static_cast<size_t>(n * height * width));
      batch_mean.push_back(mean_of(values));
      batch_var.push_back(var_of(values, false));
      running_mean[c] = (1 - momentum) * running_mean[c] + momentum * batch_mean[c];
      running_var[c] = (1 - momentum) * running_var[c] + momentum * var_of(values, true);
    }
    expect_values(norm(x),
                  batch_norm_reference(xs, n, channels, length, batch_mean, batch_var, eps, to_double(norm.weight),
                                       to_double(norm.bias)),
                  shape, 1e-4, 1e-4);
    expect_values(norm.running_mean, running_mean, {channels}, 1e-5, 1e-5);
    expect_values(norm.running_var, running_var, {channels}, 1e-5, 1e-5);
    EXPECT_EQ(norm.num_batches_tracked.item<int64_t>(), step);
  }
  norm.eval();
  const Tensor x = Tensor::randn(shape, device());
  expect_values(norm(x),
                batch_norm_reference(to_double(x), n, channels, length, running_mean, running_var, eps,
                                     to_double(norm.weight), to_double(norm.bias)),
                shape, 1e-4, 1e-4);
  expect_values(norm.running_var, running_var, {channels}, 1e-5, 1e-5);
  EXPECT_EQ(norm.num_batches_tracked.item<int64_t>(), 2);
}

TEST_P(NormalizationTest, BatchNorm2dRunningStatsAfterTwoStepsByHand) {
  // Channel 0 holds 1, 2, 3, 4 in step one and 2, 2, 6, 6 in step two; channel 1 the same plus 10. Step one: mean
  // 2.5, unbiased variance 5/3; step two: mean 4, unbiased variance 16/3.
  const std::vector<float> step_one{1, 2, 11, 12, 3, 4, 13, 14}, step_two{2, 6, 12, 16, 2, 6, 12, 16};
  const auto batch = [&](const std::vector<float>& values) {  // [2, 2, 1, 2]: (n, c) planes of two values
    return Tensor::from_vector(values, {2, 2, 1, 2}, device());
  };
  nn::BatchNorm2d with_momentum(2, 1e-5, 0.1, false, true, device());
  with_momentum(batch(step_one));
  with_momentum(batch(step_two));
  // Means 0.9 * (0.9 * 0 + 0.1 * 2.5) + 0.1 * 4 = 0.625 and 0.9 * 0.1 * 12.5 + 0.1 * 14 = 2.525; both variances
  // 0.9 * (0.9 * 1 + 0.1 * 5/3) + 0.1 * 16/3.
  expect_values(with_momentum.running_mean, {0.625, 2.525}, {2}, 1e-6, 1e-6);
  expect_values(with_momentum.running_var, {0.81 + 0.15 + 1.6 / 3, 0.81 + 0.15 + 1.6 / 3}, {2}, 1e-6, 1e-6);
  expect_int64_values(with_momentum.num_batches_tracked, {2}, {});

  nn::BatchNorm2d cumulative(2, 1e-5, std::nullopt, false, true, device());
  cumulative(batch(step_one));
  cumulative(batch(step_two));
  // The plain averages of the two steps: (2.5 + 4) / 2 and (5/3 + 16/3) / 2.
  expect_values(cumulative.running_mean, {3.25, 13.25}, {2}, 1e-6, 1e-6);
  expect_values(cumulative.running_var, {3.5, 3.5}, {2}, 1e-6, 1e-6);
  expect_int64_values(cumulative.num_batches_tracked, {2}, {});
}

TEST_P(NormalizationTest, BatchNorm2dGradcheckInTrainingAndEval) {
  manual_seed(18);
  nn::BatchNorm2d norm(2, 1e-5, 0.1, true, true, device());
  nn::init::normal_(norm.weight);
  nn::init::normal_(norm.bias);
  const Tensor x = Tensor::randn({3, 2, 2, 3}, device()).set_requires_grad();
  auto f = [&](const std::vector<Tensor>& in) { return norm(in[0]); };
  testing::gradcheck(f, {x, norm.weight, norm.bias});
  norm.eval();
  testing::gradcheck(f, {x, norm.weight, norm.bias});
}

TEST_P(NormalizationTest, BatchNorm2dStateDictReprAndClone) {
  nn::BatchNorm2d norm(3, 1e-5, 0.1, true, true, device());
  std::vector<std::string> names;
  for (const auto& [name, tensor] : norm.state_dict()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"weight", "bias", "running_mean", "running_var", "num_batches_tracked"}));
  EXPECT_EQ(norm.num_batches_tracked.dtype(), DType::Int64);
  EXPECT_EQ(norm.name(), "BatchNorm2d");
  EXPECT_EQ(norm.extra_repr(), "3, eps=1e-05, momentum=0.1, affine=true, track_running_stats=true");
  EXPECT_EQ(nn::BatchNorm2d(2, 1e-3, std::nullopt, false, false).extra_repr(),
            "2, eps=0.001, momentum=None, affine=false, track_running_stats=false");

  // A clone has its own buffers: a training step of the original leaves the clone's running statistics alone.
  const auto copy = std::static_pointer_cast<nn::BatchNorm2d>(norm.clone());
  manual_seed(19);
  norm(Tensor::randn({2, 3, 2, 2}, device()) + 5.0f);
  expect_values(copy->running_mean, {0, 0, 0}, {3});
  EXPECT_EQ(copy->num_batches_tracked.item<int64_t>(), 0);
  EXPECT_EQ(norm.num_batches_tracked.item<int64_t>(), 1);
}

TEST_P(NormalizationTest, BatchNorm2dErrorsNameTheLayer) {
  EXPECT_ERROR(nn::BatchNorm2d(0), "nn::BatchNorm2d: num_features is 0 but expected at least 1");
  EXPECT_ERROR(nn::BatchNorm2d(3, -1.0), "nn::BatchNorm2d: eps is -1");
  EXPECT_ERROR(nn::BatchNorm2d(3, 1e-5, -0.5), "nn::BatchNorm2d: momentum is -0.5 but expected a value in [0, 1]");
  nn::BatchNorm2d norm(3, 1e-5, 0.1, true, true, device());
  EXPECT_ERROR(norm(Tensor::zeros({2, 4, 5, 5}, device())),
               "nn::BatchNorm2d: input has shape [2, 4, 5, 5] but expected [N, C, H, W] with C = num_features = 3");
  EXPECT_ERROR(norm(Tensor::zeros({4, 3}, device())),
               "nn::BatchNorm2d: input has shape [4, 3] but expected [N, C, H, W]");
  EXPECT_ERROR(norm(Tensor::zeros({3, 5, 5}, device())), "nn::BatchNorm2d: input has shape [3, 5, 5]");
  EXPECT_ERROR(norm(Tensor::zeros({1, 3, 2, 2, 1}, device())), "nn::BatchNorm2d: input has shape [1, 3, 2, 2, 1]");
  EXPECT_ERROR(norm(Tensor()), "nn::BatchNorm2d: the input is undefined");
  EXPECT_ERROR(
      norm(Tensor::zeros({1, 3, 1, 1}, device())),
      "nn::BatchNorm2d: input has shape [1, 3, 1, 1], one value per channel, but training needs more than one");
  EXPECT_EQ(norm.num_batches_tracked.item<int64_t>(), 0);
  norm.eval();
  EXPECT_EQ(norm(Tensor::zeros({1, 3, 1, 1}, device())).shape(), (Shape{1, 3, 1, 1}));
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(NormalizationTest);

}  // namespace
}  // namespace tandem
