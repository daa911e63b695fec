// The elementwise losses: mse_loss, l1_loss, smooth_l1_loss, binary_cross_entropy_with_logits.
#include <cmath>

#include "loss_common.h"
#include "tandem/core/autograd.h"
#include "tandem/core/error.h"
#include "tandem/core/ops.h"

namespace tandem::nn::detail {
namespace {

// Note [Stable binary cross-entropy]: with x the logits and y the targets, -(y log sigmoid(x) + (1 - y) log(1 -
// sigmoid(x))) = (1 - y) x + softplus(-x), and softplus(-x) = max(-x, 0) + log(1 + exp(-|x|)) never exponentiates a
// positive number. Composed of ops, max and |x| would give a wrong gradient at x = 0 exactly (a logit that a
// zero-initialized layer produces), so the gradients are the closed forms: for x, w ((1 + (p - 1) y) sigmoid(x) - p y),
// for y, w ((p - 1) softplus(-x) - x), with p = pos_weight (1 when there is none) and w = weight (1 likewise).
class BinaryCrossEntropyWithLogits final : public autograd::Function {
 public:
  BinaryCrossEntropyWithLogits(Tensor weight, Tensor pos_weight)
      : weight_(std::move(weight)), pos_weight_(std::move(pos_weight)) {}

  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    const Tensor& x = in[0];
    const Tensor& y = in[1];
    const Tensor softplus_of_negated = clamp_min(-x, 0.0f) + log(1.0f + exp(-abs(x)));
    Tensor loss = (1.0f - y) * x + (pos_weight_.defined() ? log_weight(y) * softplus_of_negated : softplus_of_negated);
    if (weight_.defined()) loss = loss * weight_;
    save_for_backward({x, y, softplus_of_negated});
    return {loss};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    const Tensor& x = saved_tensors()[0];
    const Tensor& y = saved_tensors()[1];
    const Tensor& softplus_of_negated = saved_tensors()[2];
    const Tensor g = weight_.defined() ? grads[0] * weight_ : grads[0];
    Tensor grad_x, grad_y;
    if (needs_input_grad(0)) {
      grad_x = pos_weight_.defined() ? g * (log_weight(y) * sigmoid(x) - pos_weight_ * y) : g * (sigmoid(x) - y);
    }
    if (needs_input_grad(1)) {
      grad_y = pos_weight_.defined() ? g * ((pos_weight_ - 1.0f) * softplus_of_negated - x) : -(g * x);
    }
    return {grad_x, grad_y};
  }

  std::string name() const override { return "BinaryCrossEntropyWithLogitsBackward"; }

 private:
  // 1 + (p - 1) y: the factor of softplus(-x), p for positive targets and 1 for negative ones.
  Tensor log_weight(const Tensor& y) const { return 1.0f + (pos_weight_ - 1.0f) * y; }

  Tensor weight_;      // undefined, or broadcasting to the input's shape
  Tensor pos_weight_;  // likewise
};

void check_broadcasts_to(const char* caller, const Tensor& input, const Tensor& tensor, const char* what) {
  if (!tensor.defined()) return;
  const bool fits = broadcast_shapes(tensor.shape(), input.shape(), caller) == input.shape();
  TANDEM_CHECK(fits, caller, ": ", what, " has shape ", to_string(tensor.shape()),
               " but expected a shape that broadcasts to input's ", to_string(input.shape()));
}

}  // namespace

Tensor MSELossFunction::operator()(const Tensor& input, const Tensor& target, Reduction reduction) const {
  check_elementwise("nn::mse_loss", input, target);
  if (reduction == Reduction::Mean) return ::tandem::mse_loss(input, target);  // one fused op
  const Tensor difference = input - target;
  return reduce("nn::mse_loss", difference * difference, reduction);
}

Tensor L1LossFunction::operator()(const Tensor& input, const Tensor& target, Reduction reduction) const {
  check_elementwise("nn::l1_loss", input, target);
  return reduce("nn::l1_loss", abs(input - target), reduction);
}

Tensor SmoothL1LossFunction::operator()(const Tensor& input, const Tensor& target,
                                        const SmoothL1LossOptions& options) const {
  const char* caller = "nn::smooth_l1_loss";
  const auto beta = static_cast<float>(options.beta);
  TANDEM_CHECK(std::isfinite(beta) && beta >= 0.0f, caller, ": beta is ", options.beta,
               " but expected a value >= 0 within float's range");
  check_elementwise(caller, input, target);
  if (beta == 0.0f) return reduce(caller, abs(input - target), options.reduction);  // PyTorch's l1 case
  const Tensor difference = input - target;
  const Tensor distance = abs(difference);
  const Tensor losses = where(distance < beta, difference * difference * (0.5f / beta), distance - 0.5f * beta);
  return reduce(caller, losses, options.reduction);
}

Tensor BCEWithLogitsLossFunction::operator()(const Tensor& input, const Tensor& target,
                                             const BCEWithLogitsLossOptions& options) const {
  const char* caller = "nn::binary_cross_entropy_with_logits";
  check_elementwise(caller, input, target);
  check_weight(caller, input, options.weight, "weight");
  check_weight(caller, input, options.pos_weight, "pos_weight");
  check_broadcasts_to(caller, input, options.weight, "weight");
  check_broadcasts_to(caller, input, options.pos_weight, "pos_weight");
  const Tensor losses = autograd::apply(
      std::make_shared<BinaryCrossEntropyWithLogits>(options.weight, options.pos_weight), {input, target})[0];
  return reduce(caller, losses, options.reduction);
}

}  // namespace tandem::nn::detail
