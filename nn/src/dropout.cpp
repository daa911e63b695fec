#include "tandem/nn/dropout.h"

#include "tandem/core/ops.h"

namespace tandem::nn {

Dropout::Dropout(double p) : p_(p) {
  TANDEM_CHECK(p >= 0.0 && p < 1.0, "nn::Dropout: p is ", p, " but expected a probability in [0, 1)");
}

Tensor dropout(const Tensor& input, double p, bool training) {
  TANDEM_CHECK(input.defined(), "nn::dropout: the input is undefined");
  TANDEM_CHECK(p >= 0.0 && p < 1.0, "nn::dropout: p is ", p, " but expected a probability in [0, 1)");
  if (!training || p == 0.0) return input;
  // Note [Dropout masks] in dropout.h. An element is kept when its uniform value u in [0, 1) has u >= p, which
  // happens with probability 1 - p.
  const Tensor kept = Tensor::rand(input.shape(), input.device()) >= static_cast<float>(p);
  return input * (kept * static_cast<float>(1.0 / (1.0 - p)));
}

Tensor Dropout::forward(const Tensor& input) {
  TANDEM_CHECK(input.defined(), "nn::Dropout: the input is undefined");
  return dropout(input, p_, is_training());
}

std::string Dropout::extra_repr() const { return "p=" + std::to_string(p_); }

}  // namespace tandem::nn
