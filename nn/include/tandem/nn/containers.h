#pragma once
// nn::ModuleList and nn::ModuleDict: containers of submodules, as PyTorch's. They register what they hold, so its
// parameters, buffers, state_dict names ("0.weight", "encoder.weight"), to(), clone() and replicate() work through
// them; they have no forward of their own (calling one is an Error): the module that owns them decides the order.
//
//   class Stack : public nn::Cloneable<Stack> {
//    public:
//     Stack() { for (int i = 0; i < 3; ++i) layers->push_back(std::make_shared<nn::Linear>(8, 8));
//               register_module("layers", layers); }
//     Tensor forward(const Tensor& x) override { Tensor y = x; for (const auto& layer : *layers) y = layer->forward(y);
//                                                 return y; }
//     std::shared_ptr<nn::ModuleList> layers = std::make_shared<nn::ModuleList>();
//   };

#include <cstddef>
#include <initializer_list>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tandem/core/error.h"
#include "tandem/nn/module.h"

namespace tandem::nn {

namespace detail {

// Submodules named "0", "1", ... in order: what nn::ModuleList and nn::Sequential share. Self is the container's
// class (Cloneable's), whose name the errors give.
template <class Self>
class IndexedModules : public Cloneable<Self> {
 public:
  void push_back(std::shared_ptr<Module> module) {  // Errors: a null module
    TANDEM_CHECK(module != nullptr, "nn::", this->name(), "::push_back: module ", size(), " is null");
    this->register_module(std::to_string(size()), std::move(module));
  }
  size_t size() const { return this->child_count(); }
  bool empty() const { return this->child_count() == 0; }
  std::shared_ptr<Module> operator[](size_t index) const {  // Errors: index out of range
    TANDEM_CHECK(index < size(), "nn::", this->name(), ": index ", index, " is out of range for ", size(),
                 " modules");
    return this->child(index);
  }

  // The modules in order, for range-for (read from the registry, so a clone iterates its own copies).
  class Iterator {
   public:
    Iterator(const IndexedModules* list, size_t index) : list_(list), index_(index) {}
    std::shared_ptr<Module> operator*() const { return (*list_)[index_]; }
    Iterator& operator++() {
      ++index_;
      return *this;
    }
    bool operator==(const Iterator& other) const = default;

   private:
    const IndexedModules* list_;
    size_t index_;
  };
  Iterator begin() const { return {this, 0}; }
  Iterator end() const { return {this, size()}; }

 protected:
  IndexedModules() = default;
  explicit IndexedModules(std::initializer_list<std::shared_ptr<Module>> modules) {
    for (const auto& module : modules) push_back(module);
  }
};

}  // namespace detail

// Submodules named "0", "1", ... in order; no forward of its own.
class ModuleList : public detail::IndexedModules<ModuleList> {
 public:
  ModuleList() = default;
  ModuleList(std::initializer_list<std::shared_ptr<Module>> modules) : IndexedModules(modules) {}
};

// Submodules by name, in insertion order.
class ModuleDict : public Cloneable<ModuleDict> {
 public:
  ModuleDict() = default;
  ModuleDict(std::initializer_list<std::pair<std::string, std::shared_ptr<Module>>> modules);

  // Errors: a null module; a name already held, empty or containing '.'.
  void insert(const std::string& name, std::shared_ptr<Module> module);
  size_t size() const { return child_count(); }
  bool contains(const std::string& name) const;
  std::shared_ptr<Module> operator[](const std::string& name) const;  // Errors: no module of that name
  std::vector<std::string> keys() const;                               // in insertion order
};

}  // namespace tandem::nn
