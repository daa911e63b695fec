#include "tandem/nn/containers.h"

#include <string>

namespace tandem::nn {

ModuleList::ModuleList(std::initializer_list<std::shared_ptr<Module>> modules) {
  for (const auto& module : modules) push_back(module);
}

void ModuleList::push_back(std::shared_ptr<Module> module) {
  TANDEM_CHECK(module != nullptr, "nn::ModuleList::push_back: module ", size(), " is null");
  register_module(std::to_string(size()), std::move(module));
}

std::shared_ptr<Module> ModuleList::operator[](size_t index) const {
  TANDEM_CHECK(index < size(), "nn::ModuleList: index ", index, " is out of range for ", size(), " modules");
  return child(index);
}

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
