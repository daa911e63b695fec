#pragma once
// Losses, as functions and as modules (a loss module takes two inputs: input and target).

#include <vector>

#include "tandem/nn/module.h"

namespace tandem::nn {

// mean((input - target)^2) over all elements; input and target must have equal shapes and share one device.
// It has the signature of the core op tandem::mse_loss, so call it qualified (nn::mse_loss): Tensor arguments find
// tandem::mse_loss by argument-dependent lookup as well.
Tensor mse_loss(const Tensor& input, const Tensor& target);

// mse_loss as a module with two inputs: loss(input, target), or forward_all({input, target}) returning one tensor.
// Errors: another number of inputs; mse_loss's errors.
class MSELoss : public Cloneable<MSELoss> {
 public:
  std::vector<Tensor> forward_all(const std::vector<Tensor>& inputs) override;
};

}  // namespace tandem::nn
