#pragma once
// Stateless activation layers.

#include "tandem/nn/module.h"

namespace tandem::nn {

class ReLU : public Cloneable<ReLU> {
 public:
  Tensor forward(const Tensor& input) override;
};

class Tanh : public Cloneable<Tanh> {
 public:
  Tensor forward(const Tensor& input) override;
};

}  // namespace tandem::nn
