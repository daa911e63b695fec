#include "raw_ops.h"
#include "tandem/core/autograd.h"
#include "tandem/core/error.h"

namespace tandem::autograd {

namespace {

// Wraps a user (or built-in) Function as a graph node.
class FunctionNode final : public Node {
 public:
  FunctionNode(std::shared_ptr<Function> function, const std::vector<Tensor>& inputs)
      : function_(std::move(function)), name_(function_->name()) {
    for (const Tensor& input : inputs) input_meta_.push_back({input.defined() ? input.shape() : Shape{},
                                                              input.defined() ? input.device() : Device()});
  }

  std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) override {
    TANDEM_CHECK(function_ != nullptr, "backward: ", name_, " was already run backward; its saved tensors were "
                 "freed (call backward once per forward)");
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
  void release() override { function_.reset(); }

 private:
  std::shared_ptr<Function> function_;
  std::string name_;
  std::vector<OutputMeta> input_meta_;
};

}  // namespace

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

}  // namespace tandem::autograd
