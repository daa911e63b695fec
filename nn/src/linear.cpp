#include "tandem/nn/linear.h"

#include "fan_in_uniform.h"
#include "tandem/core/ops.h"
#include "tandem/core/shape.h"

namespace tandem::nn {

Linear::Linear(int64_t in_features, int64_t out_features, bool bias, Device device)
    : in_features_(in_features), out_features_(out_features) {
  TANDEM_CHECK(in_features > 0, "nn::Linear: in_features must be positive, got ", in_features);
  TANDEM_CHECK(out_features > 0, "nn::Linear: out_features must be positive, got ", out_features);
  weight = detail::fan_in_uniform({out_features, in_features}, in_features, device);
  register_parameter("weight", weight);
  if (bias) {
    this->bias = detail::fan_in_uniform({out_features}, in_features, device);
    register_parameter("bias", this->bias);
  }
}

Tensor Linear::forward(const Tensor& input) { return apply(input, false); }

Tensor Linear::forward_relu(const Tensor& input) { return apply(input, true); }

Tensor Linear::apply(const Tensor& input, bool relu) {
  TANDEM_CHECK(input.defined(), "nn::Linear: the input is undefined");
  TANDEM_CHECK(input.dim() >= 1 && input.size(-1) == in_features_, "nn::Linear: input has shape ",
               to_string(input.shape()), " but expected [..., ", in_features_, "] (in_features = ", in_features_,
               ", weight ", to_string(weight.shape()), ")");
  const auto product = [&](const Tensor& x) {
    return relu ? linear_relu(x, weight, bias, precision()) : linear(x, weight, bias, precision());
  };
  if (input.dim() == 2) return product(input);
  Shape out_shape = input.shape();
  out_shape.back() = out_features_;
  return product(input.reshape({-1, in_features_})).reshape(out_shape);
}

std::string Linear::extra_repr() const {
  return "in_features=" + std::to_string(in_features_) + ", out_features=" + std::to_string(out_features_) +
         ", bias=" + (bias.defined() ? "true" : "false");
}

}  // namespace tandem::nn
