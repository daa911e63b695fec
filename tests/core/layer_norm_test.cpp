// layer_norm (the fused op behind nn::LayerNorm) against its definition computed here in double, forward and the
// three gradients, for row widths that take the float4 and the scalar kernels, a single row and many (the weight and
// bias gradients summed over chunks of rows), no rows; gradcheck; bitwise equal gradients from run to run; errors.
#include <cmath>

#include "support/test_support.h"

namespace tandem {
namespace {

using testing::expect_values;
using testing::to_double;

struct LayerNormReference {
  std::vector<double> out, grad_x, grad_weight, grad_bias;
};

// The definition, and the gradients of sum(out * g): x, g [rows, cols]; w and b [cols] (1 and 0 when empty).
LayerNormReference layer_norm_reference(const std::vector<double>& x, const std::vector<double>& g, int64_t cols, double eps,
                    std::vector<double> w, std::vector<double> b) {
  if (w.empty()) w.assign(cols, 1.0);
  if (b.empty()) b.assign(cols, 0.0);
  const int64_t rows = static_cast<int64_t>(x.size()) / cols;
  LayerNormReference r{std::vector<double>(x.size()), std::vector<double>(x.size()), std::vector<double>(cols, 0.0),
              std::vector<double>(cols, 0.0)};
  for (int64_t i = 0; i < rows; ++i) {
    double mean = 0.0, var = 0.0;
    for (int64_t c = 0; c < cols; ++c) mean += x[i * cols + c] / static_cast<double>(cols);
    for (int64_t c = 0; c < cols; ++c) var += std::pow(x[i * cols + c] - mean, 2) / static_cast<double>(cols);
    const double rstd = 1.0 / std::sqrt(var + eps);
    double gy_mean = 0.0, gy_xhat_mean = 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      const double xhat = (x[i * cols + c] - mean) * rstd, gy = g[i * cols + c] * w[c];
      r.out[i * cols + c] = xhat * w[c] + b[c];
      gy_mean += gy / static_cast<double>(cols);
      gy_xhat_mean += gy * xhat / static_cast<double>(cols);
      r.grad_weight[c] += g[i * cols + c] * xhat;
      r.grad_bias[c] += g[i * cols + c];
    }
    for (int64_t c = 0; c < cols; ++c) {
      const double xhat = (x[i * cols + c] - mean) * rstd, gy = g[i * cols + c] * w[c];
      r.grad_x[i * cols + c] = rstd * (gy - gy_mean - xhat * gy_xhat_mean);
    }
  }
  return r;
}

class LayerNormOpTest : public testing::EveryDevice {
 protected:
  void SetUp() override {
    EveryDevice::SetUp();
    manual_seed(29);
  }

  // layer_norm over the trailing `normalized` of `shape` against the reference, with a weight and a bias when asked.
  void check(const Shape& shape, const Shape& normalized, bool with_weight, bool with_bias, double eps = 1e-5) {
    SCOPED_TRACE("shape " + to_string(shape) + " normalized " + to_string(normalized) + (with_weight ? " weight" : "") +
                 (with_bias ? " bias" : ""));
    const Tensor x = (Tensor::randn(shape, device()) * 3.0f + 1.5f).set_requires_grad();
    const Tensor w = with_weight ? Tensor::randn(normalized, device()).set_requires_grad() : Tensor();
    const Tensor b = with_bias ? Tensor::randn(normalized, device()).set_requires_grad() : Tensor();
    const Tensor g = Tensor::randn(shape, device());
    const Tensor out = layer_norm(x, normalized, w, b, eps);
    sum(out * g).backward();
    const int64_t cols = numel_of(normalized);
    const LayerNormReference r = layer_norm_reference(to_double(x), to_double(g), cols, eps, with_weight ? to_double(w) : std::vector<double>{},
                                  with_bias ? to_double(b) : std::vector<double>{});
    expect_values(out, r.out, shape, 1e-5, 1e-5);
    expect_values(x.grad(), r.grad_x, shape, 1e-4, 1e-4);
    if (with_weight) expect_values(w.grad(), r.grad_weight, normalized, 1e-4, 1e-3);
    if (with_bias) expect_values(b.grad(), r.grad_bias, normalized, 1e-4, 1e-3);
  }
};

TEST_P(LayerNormOpTest, MatchesTheDefinitionForEveryRowWidth) {
  for (int64_t cols : {1, 3, 4, 7, 12, 128, 384, 1000}) check({9, cols}, {cols}, true, true);
  check({2, 3, 8}, {8}, true, true);
  check({4, 3, 4}, {3, 4}, true, true);  // two normalized dims
  check({5, 6}, {6}, true, false);
  check({5, 6}, {6}, false, false);
  check({5, 6}, {6}, true, true, 0.5);
}

TEST_P(LayerNormOpTest, SumsTheParameterGradientsOverManyRows) {
  check({300, 40}, {40}, true, true);    // 5 chunks of rows
  check({40000, 4}, {4}, true, true);    // the most chunks, each of many rows
  check({20, 33, 96}, {96}, true, true);  // rows beyond one block of warps, float4 rows
}

TEST_P(LayerNormOpTest, NoRowsGiveEmptyOutputsAndZeroParameterGradients) {
  const Tensor x = Tensor::zeros({0, 5}, device()).set_requires_grad();
  const Tensor w = Tensor::ones({5}, device()).set_requires_grad();
  const Tensor b = Tensor::zeros({5}, device()).set_requires_grad();
  const Tensor out = layer_norm(x, {5}, w, b);
  EXPECT_EQ(out.shape(), (Shape{0, 5}));
  sum(out).backward();
  expect_values(w.grad(), {0, 0, 0, 0, 0}, {5});
  expect_values(b.grad(), {0, 0, 0, 0, 0}, {5});
}

TEST_P(LayerNormOpTest, ReadsStridedInputs) {
  const Tensor x = Tensor::randn({6, 5}, device());
  const Tensor t = x.t();  // [5, 6], not contiguous
  const LayerNormReference r = layer_norm_reference(to_double(t), std::vector<double>(30, 0.0), 6, 1e-5, {}, {});
  expect_values(layer_norm(t, {6}), r.out, {5, 6}, 1e-5, 1e-5);
}

TEST_P(LayerNormOpTest, Gradcheck) {
  const auto f = [](const std::vector<Tensor>& in) { return layer_norm(in[0], {2, 3}, in[1], in[2]); };
  testing::gradcheck(f, {Tensor::randn({4, 2, 3}, device()).set_requires_grad(),
                         Tensor::randn({2, 3}, device()).set_requires_grad(),
                         Tensor::randn({2, 3}, device()).set_requires_grad()});
}

TEST_P(LayerNormOpTest, GradientsAreBitwiseEqualFromRunToRun) {
  const Tensor x = Tensor::randn({3000, 96}, device()).set_requires_grad();
  const Tensor w = Tensor::randn({96}, device()).set_requires_grad();
  const Tensor g = Tensor::randn({3000, 96}, device());
  std::vector<std::vector<float>> runs;
  for (int run = 0; run < 2; ++run) {
    w.set_grad(Tensor());
    x.set_grad(Tensor());
    sum(layer_norm(x, {96}, w) * g).backward();
    std::vector<float> grads = w.grad().to_vector();
    const std::vector<float> grad_x = x.grad().to_vector();
    grads.insert(grads.end(), grad_x.begin(), grad_x.end());
    runs.push_back(grads);
  }
  EXPECT_EQ(runs[0], runs[1]);
}

TEST_P(LayerNormOpTest, ErrorsNameTheOp) {
  const Tensor x = Tensor::zeros({2, 3}, device());
  EXPECT_ERROR(layer_norm(Tensor(), {3}), "layer_norm: ");
  EXPECT_ERROR(layer_norm(x.to(DType::Int64), {3}), "layer_norm: got int64 but expected float32");
  EXPECT_ERROR(layer_norm(x, {}), "layer_norm: normalized_shape is empty");
  EXPECT_ERROR(layer_norm(x, {0}), "layer_norm: normalized_shape is [0] but expected positive sizes");
  EXPECT_ERROR(layer_norm(x, {2}), "layer_norm: input has shape [2, 3] but expected [..., 2]");
  EXPECT_ERROR(layer_norm(x, {3}, Tensor::ones({2}, device())),
               "layer_norm: weight has shape [2] but expected normalized_shape [3]");
  EXPECT_ERROR(layer_norm(x, {3}, {}, Tensor::ones({3}, device()).to(DType::BFloat16)),
               "layer_norm: got float32 and bfloat16");
  EXPECT_ERROR(layer_norm(x, {3}, {}, {}, -1.0), "layer_norm: eps is -1");
  EXPECT_ERROR(layer_norm(x, {3}, {}, {}, std::nan("")), "layer_norm: eps is nan");
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(LayerNormOpTest);

}  // namespace
}  // namespace tandem
