#pragma once
// Flatten and Unflatten: torch.nn.Flatten and torch.nn.Unflatten, the reshaping layers between image and row
// layouts. Both return views of their input where its strides allow one (always for Unflatten, which splits one
// dim; Flatten copies as reshape does otherwise), and the gradient passes through unchanged in value.
//
//   nn::Flatten flatten;                            // [N, 64, 4, 4] -> [N, 1024]
//   nn::Unflatten unflatten(1, {1, 8, 8});          // [N, 64] -> [N, 1, 8, 8]

#include <cstdint>
#include <string>

#include "tandem/nn/module.h"

namespace tandem::nn {

class Flatten : public Cloneable<Flatten> {
 public:
  // Dims start_dim..end_dim (negative counts from the end; resolved against each input) merged into one.
  explicit Flatten(int64_t start_dim = 1, int64_t end_dim = -1) : start_dim_(start_dim), end_dim_(end_dim) {}
  // Errors (naming the layer): an undefined input; start_dim or end_dim out of range for the input (a 0-D input
  // has the one dim 0, and flattens to [1], as in PyTorch); start_dim after end_dim.
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;  // "start_dim=1, end_dim=-1"

  int64_t start_dim() const { return start_dim_; }
  int64_t end_dim() const { return end_dim_; }

 private:
  int64_t start_dim_;
  int64_t end_dim_;
};

class Unflatten : public Cloneable<Unflatten> {
 public:
  // Dim `dim` (negative counts from the end; resolved against each input) split into dims of `sizes`, one of which
  // may be -1 (inferred from the others). Errors: empty sizes; more than one -1; a size below -1.
  Unflatten(int64_t dim, Shape sizes);
  // Errors (naming the layer): an undefined or 0-D input; dim out of range for the input; sizes whose product is not
  // the size of dim (with a -1: a product of the others that does not divide it).
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;  // "dim=1, unflattened_size=(1, 8, 8)"

  int64_t dim() const { return dim_; }
  const Shape& sizes() const { return sizes_; }

 private:
  int64_t dim_;
  Shape sizes_;
};

}  // namespace tandem::nn
