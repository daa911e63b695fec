#include "tandem/nn/normalization.h"

#include <cmath>
#include <sstream>

#include "tandem/core/ops.h"

namespace tandem::nn {

LayerNorm::LayerNorm(Shape normalized_shape, double eps, bool elementwise_affine, bool bias, Device device)
    : normalized_shape_(std::move(normalized_shape)), eps_(eps) {
  TANDEM_CHECK(!normalized_shape_.empty(), "nn::LayerNorm: normalized_shape is empty but expected at least one size");
  for (int64_t size : normalized_shape_)
    TANDEM_CHECK(size >= 1, "nn::LayerNorm: normalized_shape is ", to_string(normalized_shape_),
                 " but expected positive sizes");
  TANDEM_CHECK(eps >= 0.0, "nn::LayerNorm: eps is ", eps, " but expected a non-negative number");
  if (elementwise_affine) {
    weight = Tensor::ones(normalized_shape_, device);
    register_parameter("weight", weight);
  }
  if (elementwise_affine && bias) {
    this->bias = Tensor::zeros(normalized_shape_, device);
    register_parameter("bias", this->bias);
  }
}

Tensor LayerNorm::forward(const Tensor& input) {
  TANDEM_CHECK(input.defined(), "nn::LayerNorm: the input is undefined");
  const auto k = static_cast<int64_t>(normalized_shape_.size());
  const Shape& shape = input.shape();
  TANDEM_CHECK(input.dim() >= k && Shape(shape.end() - k, shape.end()) == normalized_shape_,
               "nn::LayerNorm: input has shape ", to_string(shape), " but expected [..., ",
               to_string(normalized_shape_).substr(1), " (normalized_shape = ", to_string(normalized_shape_), ")");
  return layer_norm(input, normalized_shape_, weight, bias, eps_);
}

std::string LayerNorm::extra_repr() const {
  std::ostringstream os;
  os << "normalized_shape=" << to_string(normalized_shape_) << ", eps=" << eps_
     << ", elementwise_affine=" << (weight.defined() ? "true" : "false");
  if (weight.defined() && !bias.defined()) os << ", bias=false";
  return os.str();
}

}  // namespace tandem::nn
