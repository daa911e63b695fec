// The class losses: nll_loss and cross_entropy.
#include <cmath>

#include "loss_common.h"
#include "tandem/core/error.h"
#include "tandem/core/ops.h"

namespace tandem::nn::detail {
namespace {

// Note [Class targets]: int64 targets are read on the host and checked there (each error names the row), then sent to
// the input's device as the int64 index that gather reads, together with the per-row factors of the loss. Ignored
// rows gather class 0 and are then replaced by 0 with `where`, so that neither a -inf log-probability of class 0 nor
// its gradient reaches the result (0 * -inf would be NaN).
struct ClassTargets {
  Tensor index;               // int64 [N, 1] on the input's device: each row's class, 0 for ignored rows
  Tensor kept;                // float32 [N]: 1 for rows that count, 0 for ignored ones
  Tensor row_weight;          // float32 [N]: weight[class] (1 without weights), 0 for ignored rows
  double total_weight = 0.0;  // the sum of row_weight: the divisor of Reduction::Mean
};

void check_class_input(const char* caller, const Tensor& input, const Tensor& target) {
  check_defined(caller, input, target);
  check_float32(caller, input, "input");
  TANDEM_CHECK(input.dim() == 2, caller, ": input has shape ", to_string(input.shape()),
               " but expected [N, C] (a row of class scores per sample)");
  check_on_input_device(caller, input, target, "target");
}

// Class weights: undefined, or float32 [C] on input's device that does not require grad.
void check_class_weight(const char* caller, const Tensor& input, const Tensor& weight) {
  check_weight(caller, input, weight, "weight");
  TANDEM_CHECK(!weight.defined() || weight.shape() == Shape{input.size(1)}, caller, ": weight has shape ",
               to_string(weight.shape()), " but expected [", input.size(1), "] (one weight per class)");
}

ClassTargets class_targets(const char* caller, const Tensor& input, const Tensor& target, const Tensor& weight,
                           int64_t ignore_index) {
  TANDEM_CHECK(target.dtype() == DType::Int64, caller, ": target is ", target.dtype(),
               " but expected int64 class indices (convert with .to(DType::Int64))");
  const int64_t rows = input.size(0);
  const int64_t classes = input.size(1);
  TANDEM_CHECK(target.shape() == Shape{rows}, caller, ": target has shape ", to_string(target.shape()),
               " but expected [", rows, "] (one class index per row of input ", to_string(input.shape()), ")");
  check_class_weight(caller, input, weight);
  const std::vector<float> weights = weight.defined() ? weight.to_vector() : std::vector<float>{};
  const std::vector<int64_t> labels = target.to_vector_as<int64_t>();
  std::vector<int64_t> index(labels.size(), 0);
  std::vector<float> kept(labels.size(), 0.0f), row_weight(labels.size(), 0.0f);
  ClassTargets result;
  for (size_t i = 0; i < labels.size(); ++i) {
    const int64_t label = labels[i];
    if (label == ignore_index) continue;
    TANDEM_CHECK(label >= 0 && label < classes, caller, ": target[", i, "] is ", label,
                 " but expected a class index in [0, ", classes, ") or ignore_index ", ignore_index);
    index[i] = label;
    kept[i] = 1.0f;
    row_weight[i] = weights.empty() ? 1.0f : weights[static_cast<size_t>(label)];
    result.total_weight += row_weight[i];
  }
  const Device device = input.device();
  result.index = Tensor::from_vector(index, {rows, 1}, device);
  result.kept = Tensor::from_vector(kept, {rows}, device);
  result.row_weight = Tensor::from_vector(row_weight, {rows}, device);
  return result;
}

// Each row's -weight[t_i] * log_probs[i, t_i], 0 for ignored rows.
Tensor negative_log_likelihoods(const Tensor& log_probs, const ClassTargets& targets) {
  const Tensor picked = gather(log_probs, 1, targets.index).reshape({log_probs.size(0)});
  return where(targets.kept, -(picked * targets.row_weight), Tensor::zeros({}, log_probs.device()));
}

// log_probs times the class weights (as a [1, C] row), or log_probs itself without weights.
Tensor class_weighted(const Tensor& log_probs, const Tensor& weight) {
  return weight.defined() ? log_probs * weight.reshape({1, log_probs.size(1)}) : log_probs;
}

Tensor cross_entropy_of_probabilities(const Tensor& log_probs, const Tensor& target,
                                      const CrossEntropyLossOptions& options) {
  const char* caller = "nn::cross_entropy";
  TANDEM_CHECK(options.ignore_index < 0, caller, ": ignore_index is ", options.ignore_index,
               " but class-probability targets cannot be ignored (expected a negative ignore_index)");
  const auto eps = static_cast<float>(options.label_smoothing);
  const Tensor q = eps > 0.0f ? target * (1.0f - eps) + eps / static_cast<float>(log_probs.size(1)) : target;
  const Tensor rows = -sum(class_weighted(log_probs, options.weight) * q, 1);
  return reduce(caller, rows, options.reduction, static_cast<double>(log_probs.size(0)));
}

}  // namespace

Tensor NLLLossFunction::operator()(const Tensor& input, const Tensor& target, const NLLLossOptions& options) const {
  const char* caller = "nn::nll_loss";
  check_class_input(caller, input, target);
  const ClassTargets targets = class_targets(caller, input, target, options.weight, options.ignore_index);
  return reduce(caller, negative_log_likelihoods(input, targets), options.reduction, targets.total_weight);
}

Tensor CrossEntropyLossFunction::operator()(const Tensor& input, const Tensor& target,
                                            const CrossEntropyLossOptions& options) const {
  const char* caller = "nn::cross_entropy";
  check_class_input(caller, input, target);
  const double eps = options.label_smoothing;
  TANDEM_CHECK(eps >= 0.0 && eps <= 1.0, caller, ": label_smoothing is ", eps, " but expected a value in [0, 1]");
  if (target.dtype() == DType::Float32 && target.shape() == input.shape()) {
    check_class_weight(caller, input, options.weight);
    return cross_entropy_of_probabilities(log_softmax(input, 1), target, options);
  }
  const ClassTargets targets = class_targets(caller, input, target, options.weight, options.ignore_index);
  const Tensor log_probs = log_softmax(input, 1);
  Tensor rows = negative_log_likelihoods(log_probs, targets);
  if (eps > 0.0) {
    const Tensor uniform = -sum(class_weighted(log_probs, options.weight), 1);
    const Tensor smoothed = where(targets.kept, uniform, Tensor::zeros({}, input.device()));
    rows = rows * static_cast<float>(1.0 - eps) + smoothed * static_cast<float>(eps / input.size(1));
  }
  return reduce(caller, rows, options.reduction, targets.total_weight);
}

}  // namespace tandem::nn::detail
