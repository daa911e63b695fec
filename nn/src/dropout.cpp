#include "tandem/nn/dropout.h"

#include "tandem/core/ops.h"

namespace tandem::nn {

Dropout::Dropout(double p) : p_(p) {
  TANDEM_CHECK(p >= 0.0 && p < 1.0, "nn::Dropout: p is ", p, " but expected a probability in [0, 1)");
}

Tensor Dropout::forward(const Tensor& input) {
  TANDEM_CHECK(input.defined(), "nn::Dropout: the input is undefined");
  if (!is_training() || p_ == 0.0) return input;
  // Note [Dropout masks] in dropout.h. An element is kept when its uniform value u in [0, 1) has u >= p, which
  // happens with probability 1 - p.
  const Tensor kept = Tensor::rand(input.shape(), input.device()) >= static_cast<float>(p_);
  return input * (kept * static_cast<float>(1.0 / (1.0 - p_)));
}

std::string Dropout::extra_repr() const { return "p=" + std::to_string(p_); }

}  // namespace tandem::nn
