// The class losses: nll_loss and cross_entropy.
#include <string>

#include "loss_common.h"
#include "tandem/core/device_graph.h"
#include "tandem/core/error.h"
#include "tandem/core/ops.h"

namespace tandem::nn::detail {
namespace {

// Note [Class targets]: int64 targets become, on the input's device, what the loss needs per target element: the
// class that gather reads (0 for ignored elements), whether the element counts, and its class weight, and the sum of
// those weights (the divisor of Reduction::Mean) stays there too, so that nothing but the check reads the targets on
// the host. The check reads them on the host (each error names the target element) or, while a DeviceGraph captures
// the device, checks them there (check_indices_on_device; the error comes at the next copy to the host or replay).
// The classes go through float32 (the comparison with ignore_index, the zeroing of ignored elements), exact for up
// to 2^24 classes. Ignored elements gather class 0 and are then replaced by 0 with `where`, so that neither a -inf
// log-probability of class 0 nor its gradient reaches the result (0 * -inf would be NaN).
struct ClassTargets {
  Tensor index;           // int64 [N, 1, d1, ...] on the input's device: each element's class, 0 if ignored
  Tensor kept;            // float32 [N, d1, ...]: 1 for elements that count, 0 for ignored ones
  Tensor element_weight;  // float32 [N, d1, ...]: weight[class] (1 without weights), 0 for ignored elements
  Tensor total_weight;    // float32 []: the sum of element_weight, the divisor of Reduction::Mean
};

constexpr int64_t kMaxClasses = int64_t{1} << 24;

void check_class_input(const char* caller, const Tensor& input, const Tensor& target) {
  check_defined(caller, input, target);
  check_float32(caller, input, "input");
  TANDEM_CHECK(input.dim() >= 2, caller, ": input has shape ", to_string(input.shape()),
               " but expected [N, C] or [N, C, d1, ...] (class scores along dimension 1)");
  check_on_input_device(caller, input, target, "target");
}

// Class weights: undefined, or float32 [C] on input's device that does not require grad.
void check_class_weight(const char* caller, const Tensor& input, const Tensor& weight) {
  check_weight(caller, input, weight, "weight");
  TANDEM_CHECK(!weight.defined() || weight.shape() == Shape{input.size(1)}, caller, ": weight has shape ",
               to_string(weight.shape()), " but expected [", input.size(1), "] (one weight per class)");
}

// input's shape without its class dimension: the shape of class-index targets and of unreduced losses.
Shape without_classes(const Tensor& input) {
  Shape shape = input.shape();
  shape.erase(shape.begin() + 1);
  return shape;
}

// "2" for element 2 of a 1-D shape, "1, 0, 3" for the element at those coordinates of a 3-D one.
std::string coordinates(int64_t flat, const Shape& shape) {
  std::string text;
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    const std::string coordinate = std::to_string(flat % shape[d]);
    text = text.empty() ? coordinate : coordinate + ", " + text;
    flat /= shape[d];
  }
  return text;
}

ClassTargets class_targets(const char* caller, const Tensor& input, const Tensor& target, const Tensor& weight,
                           int64_t ignore_index) {
  TANDEM_CHECK(target.dtype() == DType::Int64, caller, ": target is ", target.dtype(),
               " but expected int64 class indices (convert with .to(DType::Int64))");
  const Shape shape = without_classes(input);
  const int64_t classes = input.size(1);
  TANDEM_CHECK(target.shape() == shape, caller, ": target has shape ", to_string(target.shape()), " but expected ",
               to_string(shape), " (input's shape ", to_string(input.shape()), " without its class dimension 1)");
  check_class_weight(caller, input, weight);
  TANDEM_CHECK(classes <= kMaxClasses, caller, ": input has ", classes, " classes but class-index targets take at most ",
               kMaxClasses, " (2^24)");
  if (is_capturing(input.device())) {
    check_indices_on_device(target, classes, ignore_index, caller);
  } else {
    const std::vector<int64_t> labels = target.to_vector_as<int64_t>();
    for (size_t i = 0; i < labels.size(); ++i) {
      const int64_t label = labels[i];
      TANDEM_CHECK(label == ignore_index || (label >= 0 && label < classes), caller, ": target[",
                   coordinates(static_cast<int64_t>(i), shape), "] is ", label,
                   " but expected a class index in [0, ", classes, ") or ignore_index ", ignore_index);
    }
  }
  const Tensor classes_as_float = target.to(DType::Float32);
  ClassTargets result;
  result.kept = ne(classes_as_float, static_cast<float>(ignore_index));
  Shape index_shape = shape;
  index_shape.insert(index_shape.begin() + 1, 1);
  result.index = (classes_as_float * result.kept).to(DType::Int64).reshape(index_shape);
  result.element_weight =
      weight.defined() ? index_select(weight, 0, result.index.flatten()).reshape(shape) * result.kept : result.kept;
  result.total_weight = sum(result.element_weight);
  return result;
}

// Each target element's -weight[t] * log_probs[n, t, ...], 0 for ignored elements.
Tensor negative_log_likelihoods(const Tensor& log_probs, const ClassTargets& targets) {
  const Tensor picked = gather(log_probs, 1, targets.index).reshape(targets.kept.shape());
  return where(targets.kept, -(picked * targets.element_weight), Tensor::zeros({}, log_probs.device()));
}

// log_probs times the class weights (along dimension 1), or log_probs itself without weights.
Tensor class_weighted(const Tensor& log_probs, const Tensor& weight) {
  if (!weight.defined()) return log_probs;
  Shape along_classes(static_cast<size_t>(log_probs.dim()), 1);
  along_classes[1] = log_probs.size(1);
  return log_probs * weight.reshape(along_classes);
}

Tensor cross_entropy_of_probabilities(const Tensor& log_probs, const Tensor& target,
                                      const CrossEntropyLossOptions& options) {
  const char* caller = "nn::cross_entropy";
  TANDEM_CHECK(options.ignore_index < 0, caller, ": ignore_index is ", options.ignore_index,
               " but class-probability targets cannot be ignored (expected a negative ignore_index)");
  const auto eps = static_cast<float>(options.label_smoothing);
  const Tensor q = eps > 0.0f ? target * (1.0f - eps) + eps / static_cast<float>(log_probs.size(1)) : target;
  const Tensor losses = -sum(class_weighted(log_probs, options.weight) * q, 1);
  return reduce(caller, losses, options.reduction, static_cast<double>(losses.numel()));
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
  Tensor losses = negative_log_likelihoods(log_probs, targets);
  if (eps > 0.0) {
    const Tensor uniform = -sum(class_weighted(log_probs, options.weight), 1);
    const Tensor smoothed = where(targets.kept, uniform, Tensor::zeros({}, input.device()));
    losses = losses * static_cast<float>(1.0 - eps) + smoothed * static_cast<float>(eps / input.size(1));
  }
  return reduce(caller, losses, options.reduction, targets.total_weight);
}

}  // namespace tandem::nn::detail
