#include "tandem/nn/loss_modules.h"

#include <sstream>

namespace tandem::nn {
namespace {

// `weight` on input's device: itself when either is undefined or it is there already, else a copy.
Tensor on_device_of(const Tensor& input, const Tensor& weight) {
  return weight.defined() && input.defined() ? weight.to(input.device()) : weight;
}

// "none" or the weight's shape.
std::string weight_repr(const Tensor& weight) { return weight.defined() ? to_string(weight.shape()) : "none"; }

std::string reduction_repr(Reduction reduction) { return std::string("reduction=") + reduction_name(reduction); }

}  // namespace

std::vector<Tensor> MSELoss::forward_all(const std::vector<Tensor>& inputs) {
  check_input_count(inputs, 2);
  return {mse_loss(inputs[0], inputs[1], reduction_)};
}

std::string MSELoss::extra_repr() const { return reduction_repr(reduction_); }

std::vector<Tensor> L1Loss::forward_all(const std::vector<Tensor>& inputs) {
  check_input_count(inputs, 2);
  return {l1_loss(inputs[0], inputs[1], reduction_)};
}

std::string L1Loss::extra_repr() const { return reduction_repr(reduction_); }

std::vector<Tensor> SmoothL1Loss::forward_all(const std::vector<Tensor>& inputs) {
  check_input_count(inputs, 2);
  return {smooth_l1_loss(inputs[0], inputs[1], options_)};
}

std::string SmoothL1Loss::extra_repr() const {
  std::ostringstream os;
  os << reduction_repr(options_.reduction) << ", beta=" << options_.beta;
  return os.str();
}

std::vector<Tensor> BCEWithLogitsLoss::forward_all(const std::vector<Tensor>& inputs) {
  check_input_count(inputs, 2);
  BCEWithLogitsLossOptions options = options_;
  options.weight = on_device_of(inputs[0], options.weight);
  options.pos_weight = on_device_of(inputs[0], options.pos_weight);
  return {binary_cross_entropy_with_logits(inputs[0], inputs[1], options)};
}

std::string BCEWithLogitsLoss::extra_repr() const {
  std::ostringstream os;
  os << reduction_repr(options_.reduction) << ", weight=" << weight_repr(options_.weight)
     << ", pos_weight=" << weight_repr(options_.pos_weight);
  return os.str();
}

std::vector<Tensor> NLLLoss::forward_all(const std::vector<Tensor>& inputs) {
  check_input_count(inputs, 2);
  NLLLossOptions options = options_;
  options.weight = on_device_of(inputs[0], options.weight);
  return {nll_loss(inputs[0], inputs[1], options)};
}

std::string NLLLoss::extra_repr() const {
  std::ostringstream os;
  os << reduction_repr(options_.reduction) << ", ignore_index=" << options_.ignore_index
     << ", weight=" << weight_repr(options_.weight);
  return os.str();
}

std::vector<Tensor> CrossEntropyLoss::forward_all(const std::vector<Tensor>& inputs) {
  check_input_count(inputs, 2);
  CrossEntropyLossOptions options = options_;
  options.weight = on_device_of(inputs[0], options.weight);
  return {cross_entropy(inputs[0], inputs[1], options)};
}

std::string CrossEntropyLoss::extra_repr() const {
  std::ostringstream os;
  os << reduction_repr(options_.reduction) << ", ignore_index=" << options_.ignore_index
     << ", label_smoothing=" << options_.label_smoothing << ", weight=" << weight_repr(options_.weight);
  return os.str();
}

}  // namespace tandem::nn
