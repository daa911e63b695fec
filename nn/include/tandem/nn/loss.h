#pragma once
// Losses.

#include "tandem/nn/module.h"

namespace tandem::nn {

// mean((input - target)^2) over all elements; input and target must have equal shapes and share one device.
// It has the signature of the core op tandem::mse_loss, so call it qualified (nn::mse_loss): Tensor arguments find
// tandem::mse_loss by argument-dependent lookup as well.
Tensor mse_loss(const Tensor& input, const Tensor& target);

class MSELoss : public Cloneable<MSELoss> {
 public:
  using Module::operator();
  Tensor operator()(const Tensor& input, const Tensor& target) const;
  // A loss needs a target: throws Error saying to call the loss with (input, target).
  Tensor forward(const Tensor& input) override;
};

}  // namespace tandem::nn
