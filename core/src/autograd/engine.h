#pragma once
// The backward engine, as Tensor::backward and autograd::backward use it.

#include <functional>
#include <string>
#include <vector>

#include "tandem/core/autograd.h"
#include "tandem/core/tensor.h"

namespace tandem::autograd::detail {

// The leaves whose .grad one evaluation of a node may write its inputs' gradients into, one entry per input (Note
// [Gradients written in place] in engine.cpp). The engine builds it, Function::write_leaf_gradient uses it, and the
// engine then retires the accumulators that were written.
class LeafWrites {
 public:
  // accumulators[i]: the accumulator of input i's leaf where its gradient may be written, null where not.
  explicit LeafWrites(std::vector<AccumulateGrad*> accumulators)
      : accumulators_(std::move(accumulators)), written_(accumulators_.size(), 0) {}

  size_t size() const { return accumulators_.size(); }
  bool written(size_t input) const { return written_[input] != 0; }  // requires input < size()
  // Offers input's leaf gradient to `write` (AccumulateGrad::accumulate_in_place) when it may be written; returns
  // whether it was. Requires input < size() and !written(input).
  bool write(size_t input, const std::function<bool(const Tensor& grad, bool overwrite)>& write);

 private:
  std::vector<AccumulateGrad*> accumulators_;
  std::vector<char> written_;
};

// The gradient that seeds backward at `root`: `gradient` on the root's device, or 1 when `gradient` is undefined
// and the root has one element. Messages begin "<caller>: " and call the root `subject` ("the tensor", "root 2").
// Errors: an undefined root; a root that does not require grad; an undefined gradient for a root of more than one
// element; a gradient of another shape than the root.
Tensor seed_gradient(const Tensor& root, const Tensor& gradient, const char* caller, const std::string& subject);

// Runs backward from `roots` seeded with `seeds` (one per root, as seed_gradient makes them). Each node that runs
// frees its saved tensors unless retain_graph (Note [Saved tensors] in function.cpp).
void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& seeds, bool retain_graph);

}  // namespace tandem::autograd::detail
