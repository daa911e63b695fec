#pragma once
// nn::Linear: y = x W^T + b.

#include <cstdint>
#include <string>

#include "tandem/nn/module.h"

namespace tandem::nn {

class Linear : public Cloneable<Linear> {
 public:
  // weight: [out_features, in_features], bias: [out_features] (none when bias is false). Both are drawn from
  // U(-1/sqrt(in_features), 1/sqrt(in_features)) with the global generator, as torch.nn.Linear does; the values do
  // not depend on `device`.
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Device device = Device::cpu());

  // input: [..., in_features] (at least 1-D) -> [..., out_features], the product in precision() (Module).
  Tensor forward(const Tensor& input) override;
  // relu(forward(input)) as one op, the ReLU in the product's epilogue (linear_relu in tandem/core/ops.h): what
  // nn::Sequential runs for a Linear followed by a ReLU.
  Tensor forward_relu(const Tensor& input);
  std::string extra_repr() const override;

  int64_t in_features() const { return in_features_; }
  int64_t out_features() const { return out_features_; }

  Tensor weight;
  Tensor bias;  // undefined (and not a parameter) when built with bias = false

 private:
  Tensor apply(const Tensor& input, bool relu);

  int64_t in_features_;
  int64_t out_features_;
};

}  // namespace tandem::nn
