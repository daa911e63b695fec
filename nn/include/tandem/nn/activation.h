#pragma once
// Activation layers: the elementwise functions of core/ops.h as modules.

#include <cstdint>
#include <string>

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

class Sigmoid : public Cloneable<Sigmoid> {
 public:
  Tensor forward(const Tensor& input) override;
};

// torch.nn.GELU: x * Phi(x) with approximate "none" (erf), or its tanh approximation with "tanh".
class GELU : public Cloneable<GELU> {
 public:
  // Errors: approximate other than "none" or "tanh".
  explicit GELU(std::string approximate = "none");
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;

 private:
  std::string approximate_;
};

// torch.nn.Softmax: softmax along `dim` (negative counts from the end).
class Softmax : public Cloneable<Softmax> {
 public:
  explicit Softmax(int64_t dim) : dim_(dim) {}
  // Errors: dim out of range for the input (naming the layer).
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override { return "dim=" + std::to_string(dim_); }

 private:
  int64_t dim_;
};

}  // namespace tandem::nn
