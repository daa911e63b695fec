#include "tandem/nn/sequential.h"

#include <string>

namespace tandem::nn {

Sequential::Sequential(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (const auto& module : modules) push_back(module);
}

void Sequential::push_back(std::shared_ptr<Module> module) {
  TANDEM_CHECK(module != nullptr, "nn::Sequential::push_back: module ", size(), " is null");
  register_module(std::to_string(size()), std::move(module));
}

std::shared_ptr<Module> Sequential::operator[](size_t index) const {
  TANDEM_CHECK(index < size(), "nn::Sequential: index ", index, " is out of range for ", size(), " modules");
  return child(index);
}

Tensor Sequential::forward(const Tensor& input) {
  Tensor x = input;
  for (size_t i = 0; i < size(); ++i) x = child(i)->forward(x);
  return x;
}

}  // namespace tandem::nn
