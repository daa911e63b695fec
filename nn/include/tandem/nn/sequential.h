#pragma once
// nn::Sequential: runs its children in order, feeding each one's output to the next. Children are named "0", "1",
// ... so parameters are named "0.weight", "0.bias", "2.weight", ... as in PyTorch. Built from a list of modules, given
// as shared pointers or as values, in any mix:
//
//   nn::Sequential net(nn::Linear(10, 20), nn::ReLU(), nn::Dropout(0.1), std::make_shared<nn::Linear>(20, 1));
//   nn::Sequential same{std::make_shared<nn::Linear>(10, 20), std::make_shared<nn::ReLU>()};
//
// A module given by value is copied into a new shared object (sharing its parameter tensors with the value given, as
// any copy of a module does: Note [Member slots] in module.h); a shared pointer is kept as it is.

#include <concepts>
#include <cstddef>
#include <initializer_list>
#include <memory>
#include <type_traits>

#include "tandem/nn/containers.h"
#include "tandem/nn/module.h"

namespace tandem::nn {

namespace detail {
// A module for Sequential's variadic constructor: a std::shared_ptr to a Module, or a Module value.
template <class M>
concept SequentialElement =
    std::derived_from<std::remove_cvref_t<M>, Module> || std::convertible_to<M, std::shared_ptr<Module>>;

template <SequentialElement M>
std::shared_ptr<Module> shared_module(M&& module) {
  if constexpr (std::derived_from<std::remove_cvref_t<M>, Module>) {
    return std::make_shared<std::remove_cvref_t<M>>(std::forward<M>(module));
  } else {
    return std::shared_ptr<Module>(std::forward<M>(module));
  }
}
}  // namespace detail

class Sequential : public detail::IndexedModules<Sequential> {
 public:
  Sequential() = default;
  Sequential(std::initializer_list<std::shared_ptr<Module>> modules) : IndexedModules(modules) {}
  // One argument that is a Sequential is a copy (the copy constructor), not a nesting: nest it as a shared_ptr.
  template <detail::SequentialElement... Ms>
    requires(sizeof...(Ms) > 0 && !(sizeof...(Ms) == 1 && (std::same_as<std::remove_cvref_t<Ms>, Sequential> && ...)))
  explicit Sequential(Ms&&... modules) {
    (push_back(detail::shared_module(std::forward<Ms>(modules))), ...);
  }

  // push_back, size, empty, operator[] and range-for: detail::IndexedModules (containers.h).

  // An empty Sequential returns its input. A child that is an nn::Linear immediately followed by an nn::ReLU (both
  // of exactly those classes, not derived ones) runs as one op, Linear::forward_relu: the same values, one pass over
  // the output fewer (Note [Fused linear and ReLU] in core/src/ops.cpp).
  Tensor forward(const Tensor& input) override;
};

}  // namespace tandem::nn
