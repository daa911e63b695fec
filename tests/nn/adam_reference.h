#pragma once
// torch.optim.Adam's and AdamW's update rule in float64 on the host, written from PyTorch's documented algorithm,
// for the optimizer tests to compare against; and the quadratic problem they optimize.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace tandem::testing {

struct AdamReference {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0.0;
  bool decoupled = false;  // AdamW
  bool amsgrad = false;

  int64_t t = 0;
  std::vector<double> m, v, v_max;

  // One update of `p` from gradient `g` (both of one length).
  void step(std::vector<double>& p, std::vector<double> g) {
    if (t == 0) m = v = v_max = std::vector<double>(p.size(), 0.0);
    ++t;
    const double bias_correction1 = 1.0 - std::pow(beta1, static_cast<double>(t));
    const double bias_correction2 = 1.0 - std::pow(beta2, static_cast<double>(t));
    for (size_t i = 0; i < p.size(); ++i) {
      if (decoupled) {
        p[i] *= 1.0 - lr * weight_decay;
      } else {
        g[i] += weight_decay * p[i];
      }
      m[i] = beta1 * m[i] + (1.0 - beta1) * g[i];
      v[i] = beta2 * v[i] + (1.0 - beta2) * g[i] * g[i];
      v_max[i] = std::max(v_max[i], v[i]);
      const double second = amsgrad ? v_max[i] : v[i];
      p[i] -= lr / bias_correction1 * m[i] / (std::sqrt(second) / std::sqrt(bias_correction2) + eps);
    }
  }
};

// The problem: loss = sum(0.5 * scale * (p - target)^2), so grad = scale * (p - target). Targets stay far enough
// from the parameters over a few dozen steps that the gradients never pass near zero, where Adam's normalized step
// would amplify float32 rounding.
struct Quadratic {
  std::vector<double> start = {1.0, -2.0, 0.5, 3.0, -1.5, 0.25};
  std::vector<double> target = {4.0, -6.0, -3.0, 7.5, 2.5, -4.0};
  std::vector<double> scale = {1.0, 0.5, 2.0, 0.25, 4.0, 1.5};

  std::vector<double> gradient(const std::vector<double>& p) const {
    std::vector<double> g(p.size());
    for (size_t i = 0; i < p.size(); ++i) g[i] = scale[i] * (p[i] - target[i]);
    return g;
  }
};

}  // namespace tandem::testing
