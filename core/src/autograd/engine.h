#pragma once
// The backward engine, as Tensor::backward and autograd::backward use it.

#include <string>
#include <vector>

#include "tandem/core/tensor.h"

namespace tandem::autograd::detail {

// The gradient that seeds backward at `root`: `gradient` on the root's device, or 1 when `gradient` is undefined
// and the root has one element. Messages begin "<caller>: " and call the root `subject` ("the tensor", "root 2").
// Errors: an undefined root; a root that does not require grad; an undefined gradient for a root of more than one
// element; a gradient of another shape than the root.
Tensor seed_gradient(const Tensor& root, const Tensor& gradient, const char* caller, const std::string& subject);

// Runs backward from `roots` seeded with `seeds` (one per root, as seed_gradient makes them). Each node that runs
// frees its saved tensors unless retain_graph (Note [Saved tensors] in function.cpp).
void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& seeds, bool retain_graph);

}  // namespace tandem::autograd::detail
