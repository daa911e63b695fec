#include "cpu/layer_norm.h"

#include <cmath>
#include <vector>

namespace tandem::cpu {
using backend::data_or_null;
using backend::mutable_data_or_null;

void layer_norm_forward(const LayerNormCall& call, const Tensor& out, const Tensor& mean, const Tensor& rstd) {
  const int64_t cols = call.cols;
  const float* weight = data_or_null(call.weight);
  const float* bias = data_or_null(call.bias);
  for (int64_t r = 0; r < call.rows; ++r) {
    const float* x = call.x.data() + r * cols;
    double sum = 0.0;
    for (int64_t c = 0; c < cols; ++c) sum += x[c];
    const double mu = sum / static_cast<double>(cols);
    double squares = 0.0;
    for (int64_t c = 0; c < cols; ++c) squares += (x[c] - mu) * (x[c] - mu);
    const double inv = 1.0 / std::sqrt(squares / static_cast<double>(cols) + call.eps);
    float* y = out.mutable_data() + r * cols;
    for (int64_t c = 0; c < cols; ++c) {
      const double normalized = (x[c] - mu) * inv;
      y[c] = static_cast<float>(normalized * (weight ? weight[c] : 1.0f) + (bias ? bias[c] : 0.0f));
    }
    mean.mutable_data()[r] = static_cast<float>(mu);
    rstd.mutable_data()[r] = static_cast<float>(inv);
  }
}

// With xhat = (x - mean) * rstd and gy = grad_out * weight, each row's
//   grad_x = rstd * (gy - mean(gy) - xhat * mean(gy * xhat)),
// and over the rows grad_weight = sum(grad_out * xhat), grad_bias = sum(grad_out).
void layer_norm_backward(const LayerNormCall& call, const Tensor& grad_out, const Tensor& mean, const Tensor& rstd,
                         const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias) {
  const int64_t cols = call.cols;
  const float* weight = data_or_null(call.weight);
  float* dx = mutable_data_or_null(grad_x);
  std::vector<double> weight_sums(grad_weight.defined() ? cols : 0, 0.0);
  std::vector<double> bias_sums(grad_bias.defined() ? cols : 0, 0.0);
  for (int64_t r = 0; r < call.rows; ++r) {
    const float* x = call.x.data() + r * cols;
    const float* g = grad_out.data() + r * cols;
    const double mu = mean.data()[r], inv = rstd.data()[r];
    double gy_sum = 0.0, gy_xhat_sum = 0.0;
    for (int64_t c = 0; c < cols; ++c) {
      const double xhat = (x[c] - mu) * inv;
      const double gy = static_cast<double>(g[c]) * (weight ? weight[c] : 1.0f);
      gy_sum += gy;
      gy_xhat_sum += gy * xhat;
      if (!weight_sums.empty()) weight_sums[c] += g[c] * xhat;
      if (!bias_sums.empty()) bias_sums[c] += g[c];
    }
    if (dx == nullptr) continue;
    const double gy_mean = gy_sum / static_cast<double>(cols), gy_xhat_mean = gy_xhat_sum / static_cast<double>(cols);
    for (int64_t c = 0; c < cols; ++c) {
      const double xhat = (x[c] - mu) * inv;
      const double gy = static_cast<double>(g[c]) * (weight ? weight[c] : 1.0f);
      dx[r * cols + c] = static_cast<float>(inv * (gy - gy_mean - xhat * gy_xhat_mean));
    }
  }
  for (size_t c = 0; c < weight_sums.size(); ++c) grad_weight.mutable_data()[c] = static_cast<float>(weight_sums[c]);
  for (size_t c = 0; c < bias_sums.size(); ++c) grad_bias.mutable_data()[c] = static_cast<float>(bias_sums[c]);
}

}  // namespace tandem::cpu
