#pragma once
// nn::Sequential: runs its children in order, feeding each one's output to the next. Children are named "0", "1",
// ... so parameters are named "0.weight", "0.bias", "2.weight", ... as in PyTorch.

#include <cstddef>
#include <initializer_list>
#include <memory>

#include "tandem/nn/module.h"

namespace tandem::nn {

class Sequential : public Cloneable<Sequential> {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules);

  void push_back(std::shared_ptr<Module> module);  // not null
  size_t size() const { return child_count(); }
  bool empty() const { return child_count() == 0; }
  std::shared_ptr<Module> operator[](size_t index) const;  // throws Error when out of range

  // An empty Sequential returns its input.
  Tensor forward(const Tensor& input) override;
};

}  // namespace tandem::nn
