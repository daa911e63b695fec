#include "tandem/nn/activation.h"

#include "tandem/core/ops.h"

namespace tandem::nn {

Tensor ReLU::forward(const Tensor& input) { return relu(input); }

Tensor Tanh::forward(const Tensor& input) { return tanh(input); }

}  // namespace tandem::nn
