#include "tandem/nn/activation.h"

#include <algorithm>

#include "tandem/core/ops.h"
#include "tandem/core/shape.h"

namespace tandem::nn {

Tensor ReLU::forward(const Tensor& input) { return relu(input); }

Tensor Tanh::forward(const Tensor& input) { return tanh(input); }

Tensor Sigmoid::forward(const Tensor& input) { return sigmoid(input); }

GELU::GELU(std::string approximate) : approximate_(std::move(approximate)) {
  TANDEM_CHECK(approximate_ == "none" || approximate_ == "tanh", "nn::GELU: approximate is '",
               excerpt(approximate_), "' but expected 'none' or 'tanh'");
}

Tensor GELU::forward(const Tensor& input) { return gelu(input, approximate_); }

std::string GELU::extra_repr() const { return "approximate='" + approximate_ + "'"; }

Tensor Softmax::forward(const Tensor& input) {
  TANDEM_CHECK(input.defined(), "nn::Softmax: the input is undefined");
  const int64_t rank = std::max<int64_t>(input.dim(), 1);  // a 0-D input has the one dim 0 (or -1), as in PyTorch
  TANDEM_CHECK(dim_ >= -rank && dim_ < rank, "nn::Softmax: dim ", dim_, " is out of range for an input of shape ",
               to_string(input.shape()));
  return softmax(input, dim_);
}

}  // namespace tandem::nn
