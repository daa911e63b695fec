#pragma once
// optim::Optimizer: what every optimizer over a list of parameters offers, so that code above nn (the replicated
// training path, the Trainer) can drive any of them: an update step, zeroing the gradients, and the state a
// checkpoint keeps.

#include <vector>

#include "tandem/core/tensor.h"

namespace tandem::optim {

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Updates every parameter that has a gradient from it; parameters without one are skipped.
  virtual void step() = 0;
  // As nn::Module::zero_grad.
  void zero_grad(bool set_to_none = true);
  const std::vector<Tensor>& parameters() const { return parameters_; }

  // The optimizer's state, for checkpoints: at most one tensor per parameter (of the parameter's shape), in
  // parameters() order, undefined where there is none.
  virtual std::vector<Tensor> state() const = 0;
  // Restores state(): one entry per parameter, undefined or of the parameter's shape (any device: values are
  // copied onto the parameter's device, never aliased). Errors: another count or shape.
  virtual void set_state(const std::vector<Tensor>& state) = 0;

 protected:
  // Requires defined leaf tensors, no duplicates, not empty; errors start with `who` ("optim::SGD").
  Optimizer(std::vector<Tensor> parameters, const char* who);
  Optimizer(Optimizer&&) = default;

 private:
  std::vector<Tensor> parameters_;
};

}  // namespace tandem::optim
