#include "tandem/nn/sequential.h"

#include <string>
#include <typeinfo>

#include "tandem/nn/activation.h"
#include "tandem/nn/linear.h"

namespace tandem::nn {

namespace {

// The child as an nn::Linear when it is exactly one (a class derived from it may change forward).
Linear* exact_linear(const std::shared_ptr<Module>& module) {
  return typeid(*module) == typeid(Linear) ? static_cast<Linear*>(module.get()) : nullptr;
}

bool is_exact_relu(const std::shared_ptr<Module>& module) { return typeid(*module) == typeid(ReLU); }

}  // namespace

Tensor Sequential::forward(const Tensor& input) {
  Tensor x = input;
  for (size_t i = 0; i < size(); ++i) {
    const std::shared_ptr<Module> module = child(i);
    Linear* const linear = exact_linear(module);
    if (linear != nullptr && i + 1 < size() && is_exact_relu(child(i + 1))) {
      x = linear->forward_relu(x);
      ++i;
      continue;
    }
    x = module->forward(x);
  }
  return x;
}

}  // namespace tandem::nn
