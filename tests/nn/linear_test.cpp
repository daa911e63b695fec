// Linear: forward against a float64 host reference, initialization, errors; activations; mse_loss; a gradient
// check of a small network through its parameters.
#include <cmath>

#include "support/test_support.h"

namespace tandem {
namespace {

using testing::expect_values;
using testing::to_double;

class LinearTest : public testing::EveryDevice {};

// y[i][o] = sum_k x[i][k] * w[o][k] + b[o], in float64.
std::vector<double> linear_reference(const std::vector<double>& x, const std::vector<double>& w,
                                     const std::vector<double>& b, int64_t n, int64_t in, int64_t out) {
  std::vector<double> y(static_cast<size_t>(n * out));
  for (int64_t i = 0; i < n; ++i)
    for (int64_t o = 0; o < out; ++o) {
      double total = b.empty() ? 0.0 : b[o];
      for (int64_t k = 0; k < in; ++k) total += x[i * in + k] * w[o * in + k];
      y[i * out + o] = total;
    }
  return y;
}

TEST_P(LinearTest, ForwardMatchesFloat64Reference) {
  manual_seed(7);
  for (bool with_bias : {true, false}) {
    nn::Linear fc(5, 3, with_bias, device());
    EXPECT_EQ(fc.weight.shape(), (Shape{3, 5}));
    EXPECT_EQ(fc.weight.device(), device());
    Tensor x = Tensor::randn({4, 5}, device());
    std::vector<double> bias = with_bias ? to_double(fc.bias) : std::vector<double>{};
    expect_values(fc(x), linear_reference(to_double(x), to_double(fc.weight), bias, 4, 5, 3), {4, 3});
    EXPECT_EQ(fc.parameters().size(), with_bias ? 2u : 1u);
  }
}

TEST_P(LinearTest, ForwardFlattensLeadingDimensions) {
  manual_seed(3);
  nn::Linear fc(4, 2, true, device());
  Tensor x = Tensor::randn({2, 3, 4}, device());
  std::vector<double> expected = linear_reference(to_double(x), to_double(fc.weight), to_double(fc.bias), 6, 4, 2);
  expect_values(fc(x), expected, {2, 3, 2});
  Tensor row = Tensor::randn({4}, device());
  expect_values(fc(row), linear_reference(to_double(row), to_double(fc.weight), to_double(fc.bias), 1, 4, 2), {2});
}

TEST_P(LinearTest, InitIsBoundedAndDeterministicAcrossDevices) {
  manual_seed(42);
  nn::Linear on_device(16, 8, true, device());
  manual_seed(42);
  nn::Linear on_cpu(16, 8);
  testing::expect_close(on_device.weight, on_cpu.weight, 0, 0);
  testing::expect_close(on_device.bias, on_cpu.bias, 0, 0);

  const double bound = 1.0 / std::sqrt(16.0);
  double largest = 0;
  for (const Tensor& p : on_device.parameters())
    for (double v : to_double(p)) {
      EXPECT_LE(std::abs(v), bound);
      largest = std::max(largest, std::abs(v));
    }
  EXPECT_GT(largest, 0.8 * bound);  // 136 draws from U(-0.25, 0.25) reach past 0.2 with near certainty

  nn::Linear next(16, 8, true, device());  // the generator moved on
  EXPECT_FALSE(allclose(next.weight, on_device.weight));
}

TEST_P(LinearTest, RejectsBadSizesAndInputs) {
  EXPECT_ERROR(nn::Linear(0, 3), "nn::Linear: in_features must be positive, got 0");
  EXPECT_ERROR(nn::Linear(3, -1), "nn::Linear: out_features must be positive, got -1");
  nn::Linear fc(3, 2, true, device());
  EXPECT_ERROR(fc(Tensor::ones({4, 5}, device())),
               "nn::Linear: input has shape [4, 5] but expected [..., 3] (in_features = 3, weight [2, 3])");
  EXPECT_ERROR(fc(Tensor::scalar(1.0f, device())), "nn::Linear: input has shape [] but expected [..., 3]");
  EXPECT_ERROR(fc(Tensor()), "nn::Linear: the input is undefined");
}

TEST_P(LinearTest, ActivationsAndMseLoss) {
  Tensor x = Tensor::from_vector({-2, -0.5f, 0, 1.5f}, {2, 2}, device());
  expect_values(nn::ReLU()(x), {0, 0, 0, 1.5}, {2, 2});
  expect_values(nn::Tanh()(x), {std::tanh(-2.0), std::tanh(-0.5), 0, std::tanh(1.5)}, {2, 2});

  Tensor target = Tensor::from_vector({1, 0.5f, -1, 1.5f}, {2, 2}, device());
  // ((-3)^2 + (-1)^2 + 1^2 + 0^2) / 4 = 2.75
  expect_values(nn::mse_loss(x, target), {2.75}, {});
  expect_values(nn::MSELoss()(x, target), {2.75}, {});
  EXPECT_ERROR(nn::mse_loss(x, Tensor::ones({4}, device())),
               "nn::mse_loss: input has shape [2, 2] but target has shape [4]; they must be equal");
  nn::MSELoss loss;
  EXPECT_ERROR(loss(x), "nn::Module::forward_all: MSELoss takes 2 inputs but got 1");
}

TEST_P(LinearTest, GradcheckOfSequentialWithMse) {
  manual_seed(11);
  auto net = std::make_shared<nn::Sequential>(nn::Sequential{
      std::make_shared<nn::Linear>(3, 4), std::make_shared<nn::Tanh>(), std::make_shared<nn::Linear>(4, 2)});
  net->to(device());
  Tensor x = Tensor::randn({5, 3}, device());
  Tensor target = Tensor::randn({5, 2}, device());
  // f(parameters) = mse(net with these parameters (x), target): the check covers every weight and bias.
  auto f = [&](const std::vector<Tensor>& parameters) {
    return nn::mse_loss(net->clone_with_parameters(parameters)->forward(x), target);
  };
  testing::gradcheck(f, net->parameters());
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(LinearTest);

}  // namespace
}  // namespace tandem
