#include <algorithm>

#include "engine.h"
#include "raw_ops.h"
#include "tandem/core/autograd.h"
#include "tandem/core/error.h"

namespace tandem::autograd {

// Note [Saved tensors]: what a Function's backward needs from its forward is either metadata (shapes, devices,
// constants), kept in plain members, or tensors, kept with save_for_backward. A backward that does not retain the
// graph frees the saved tensors of every node it runs, so that activations do not outlive their one use, and the
// Function remembers that it held some: running its backward again throws, naming it. A Function that saved none
// (additions, scaling, views, device copies, the communication functions of the parallel layer) still has all it
// needs, and its node can run in any number of backward passes; this is what lets each replica made by one
// parallel::replicate run its own backward through their shared Broadcast. retain_graph=true frees nothing, so the
// whole graph can run again; its gradients then accumulate into the leaves once more.

void Function::save_for_backward(std::vector<Tensor> tensors) {
  saved_ = std::move(tensors);
  saved_tensors_freed_ = false;
}

const std::vector<Tensor>& Function::saved_tensors() const {
  check_saved_tensors("autograd::Function::saved_tensors");
  return saved_;
}

void Function::check_saved_tensors(const char* caller) const {
  TANDEM_CHECK(!saved_tensors_freed_, caller, ": ", name(), "'s saved tensors were freed by an earlier backward; "
               "pass retain_graph=true to the first backward to run it twice");
}

bool Function::write_leaf_gradient(size_t input,
                                   const std::function<bool(const Tensor& grad, bool overwrite)>& write) {
  if (leaf_writes_ == nullptr) return false;  // not inside backward
  constexpr const char* fn = "autograd::Function::write_leaf_gradient";
  TANDEM_CHECK(input < leaf_writes_->size(), fn, ": ", name(), " asked for input ", input, " but it has ",
               leaf_writes_->size(), " inputs");
  TANDEM_CHECK(!leaf_writes_->written(input), fn, ": ", name(), " wrote the gradient of input ", input,
               " twice in one backward");
  return leaf_writes_->write(input, write);
}

void Function::release_saved_tensors() {
  if (std::any_of(saved_.begin(), saved_.end(), [](const Tensor& t) { return t.defined(); }))
    saved_tensors_freed_ = true;
  saved_.clear();
}

// Wraps a user (or built-in) Function as a graph node.
class FunctionNode final : public Node {
 public:
  FunctionNode(std::shared_ptr<Function> function, const std::vector<Tensor>& inputs)
      : function_(std::move(function)), name_(function_->name()) {
    for (const Tensor& input : inputs) input_meta_.push_back({input.defined() ? input.shape() : Shape{},
                                                              input.defined() ? input.device() : Device()});
  }

  std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) override {
    function_->check_saved_tensors("backward");
    std::vector<Tensor> grads = function_->backward(grad_outputs);
    TANDEM_CHECK(grads.size() == input_meta_.size(), "backward: ", name_, "::backward returned ", grads.size(),
                 " gradients for ", input_meta_.size(), " inputs");
    for (size_t i = 0; i < grads.size(); ++i) {
      if (!grads[i].defined() || !next_edges()[i].valid()) continue;
      TANDEM_CHECK(grads[i].shape() == input_meta_[i].shape, "backward: ", name_, "::backward returned a gradient of "
                   "shape ", to_string(grads[i].shape()), " for input ", i, " of shape ",
                   to_string(input_meta_[i].shape));
      TANDEM_CHECK(grads[i].device() == input_meta_[i].device, "backward: ", name_, "::backward returned a gradient "
                   "on ", grads[i].device(), " for input ", i, " on ", input_meta_[i].device);
    }
    return grads;
  }

  std::string name() const override { return name_; }
  void release_saved_tensors() override { function_->release_saved_tensors(); }

 protected:
  // Note [Gradients written in place] in engine.cpp: backward sees the engine's permissions through
  // Function::write_leaf_gradient while it runs.
  std::vector<Tensor> apply_writing_leaves(std::vector<Tensor>&& grad_outputs,
                                           detail::LeafWrites& leaf_writes) override {
    function_->leaf_writes_ = &leaf_writes;
    std::vector<Tensor> grads;
    try {
      grads = apply(std::move(grad_outputs));
    } catch (...) {
      function_->leaf_writes_ = nullptr;
      throw;
    }
    function_->leaf_writes_ = nullptr;
    for (size_t i = 0; i < grads.size() && i < leaf_writes.size(); ++i)
      TANDEM_CHECK(!leaf_writes.written(i) || !grads[i].defined(), "backward: ", name_, "::backward wrote the "
                   "gradient of input ", i, " into its leaf and also returned one");
    return grads;
  }

 private:
  std::shared_ptr<Function> function_;
  std::string name_;
  std::vector<OutputMeta> input_meta_;
};

std::vector<Tensor> apply(const std::shared_ptr<Function>& function, const std::vector<Tensor>& inputs) {
  TANDEM_CHECK(function != nullptr, "autograd::apply: function is null");
  const bool record = any_requires_grad(inputs);
  function->needs_input_grad_.assign(inputs.size(), false);
  if (record)
    for (size_t i = 0; i < inputs.size(); ++i) function->needs_input_grad_[i] = inputs[i].requires_grad();
  std::vector<Tensor> outputs;
  {
    NoGradGuard no_grad;
    outputs = function->forward(inputs);
  }
  if (record) make_differentiable(std::make_shared<FunctionNode>(function, inputs), inputs, outputs);
  return outputs;
}

Tensor apply_one(const std::shared_ptr<Function>& function, const std::vector<Tensor>& inputs) {
  return apply(function, inputs)[0];
}

}  // namespace tandem::autograd
