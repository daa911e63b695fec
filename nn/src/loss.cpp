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

Tensor MSELoss::operator()(const Tensor& input, const Tensor& target) const { return nn::mse_loss(input, target); }

Tensor MSELoss::forward(const Tensor&) {
  TANDEM_FAIL("nn::MSELoss: forward(input) has no target; call the loss as loss(input, target)");
}

}  // namespace tandem::nn
