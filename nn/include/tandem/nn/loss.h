#pragma once
// Losses.

#include "tandem/nn/module.h"

namespace tandem::nn {

// mean((input - target)^2) over all elements; input and target must have equal shapes and share one device.
Tensor mse_loss(const Tensor& input, const Tensor& target);

class MSELoss : public Cloneable<MSELoss> {
 public:
  using Module::operator();
  Tensor operator()(const Tensor& input, const Tensor& target) const;
  // A loss needs a target: throws Error saying to call the loss with (input, target).
  Tensor forward(const Tensor& input) override;
};

}  // namespace tandem::nn
