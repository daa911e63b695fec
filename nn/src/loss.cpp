#include "tandem/nn/loss.h"

#include "tandem/core/ops.h"
#include "tandem/core/shape.h"

namespace tandem::nn {

Tensor mse_loss(const Tensor& input, const Tensor& target) {
  TANDEM_CHECK(input.defined() && target.defined(), "nn::mse_loss: the ", input.defined() ? "target" : "input",
               " is undefined");
  TANDEM_CHECK(input.shape() == target.shape(), "nn::mse_loss: input has shape ", to_string(input.shape()),
               " but target has shape ", to_string(target.shape()), "; they must be equal");
  return ::tandem::mse_loss(input, target);
}

std::vector<Tensor> MSELoss::forward_all(const std::vector<Tensor>& inputs) {
  check_input_count(inputs, 2);
  return {nn::mse_loss(inputs[0], inputs[1])};
}

}  // namespace tandem::nn
