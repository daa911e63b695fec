#include "tandem/nn/containers.h"

#include <string>

namespace tandem::nn {

ModuleDict::ModuleDict(std::initializer_list<std::pair<std::string, std::shared_ptr<Module>>> modules) {
  for (const auto& [name, module] : modules) insert(name, module);
}

void ModuleDict::insert(const std::string& name, std::shared_ptr<Module> module) {
  TANDEM_CHECK(module != nullptr, "nn::ModuleDict::insert: module '", name, "' is null");
  register_module(name, std::move(module));
}

bool ModuleDict::contains(const std::string& name) const {
  for (const auto& [key, module] : named_children()) {
    if (key == name) return true;
  }
  return false;
}

std::shared_ptr<Module> ModuleDict::operator[](const std::string& name) const {
  for (const auto& [key, module] : named_children()) {
    if (key == name) return module;
  }
  TANDEM_FAIL("nn::ModuleDict: no module named '", name, "' (", size(), " modules)");
}

std::vector<std::string> ModuleDict::keys() const {
  std::vector<std::string> names;
  for (const auto& [key, module] : named_children()) names.push_back(key);
  return names;
}

}  // namespace tandem::nn
