#pragma once
// Loss functions, with PyTorch's formulas and defaults (torch.nn.functional): mse_loss, l1_loss, smooth_l1_loss,
// binary_cross_entropy_with_logits, nll_loss and cross_entropy. Each reduces its per-element (or per-target) losses as
// `reduction` says: Mean (the default), Sum, or None (the unreduced losses).
//
// Note [Losses as objects]: each loss is a constant object whose operator() takes the options, not a set of
// overloaded functions, so that its bare name is one callable. `nn::cross_entropy` then works wherever a
// std::function<Tensor(const Tensor& output, const Tensor& target)> is expected (trainers::LossFunction), with the
// default options, and `nn::cross_entropy(logits, labels, {.label_smoothing = 0.1})` takes options. An overloaded
// function's name cannot be turned into a std::function without naming the overload.
//
// Common contract: input and target are defined and live on one device; input (and a float target) are float32;
// the gradient flows to input (and to float targets) through autograd; the optional weight tensors in the options are
// constants of the loss (Error when one requires grad: detach it). Errors name the loss ("nn::l1_loss: ...").

#include <cstdint>
#include <ostream>

#include "tandem/core/tensor.h"

namespace tandem::nn {

enum class Reduction { None, Mean, Sum };
const char* reduction_name(Reduction reduction);  // "none", "mean", "sum"; Error for a value outside the enum
std::ostream& operator<<(std::ostream& os, Reduction reduction);

struct SmoothL1LossOptions {
  Reduction reduction = Reduction::Mean;
  double beta = 1.0;  // >= 0; 0 makes it l1_loss
};

struct BCEWithLogitsLossOptions {
  Tensor weight;  // undefined, or a float32 tensor that broadcasts to input's shape: rescales each element's loss
  Reduction reduction = Reduction::Mean;
  Tensor pos_weight;  // undefined, or float32 broadcasting to input's shape (usually [C]): weight of positive targets
};

struct NLLLossOptions {
  Tensor weight;                // undefined, or float32 [C]: the weight of each class
  int64_t ignore_index = -100;  // targets equal to it add nothing, neither to the loss nor to the mean's divisor
  Reduction reduction = Reduction::Mean;
};

struct CrossEntropyLossOptions {
  Tensor weight;                // undefined, or float32 [C]: the weight of each class
  int64_t ignore_index = -100;  // class-index targets only: such targets add nothing (loss 0 under Reduction::None)
  Reduction reduction = Reduction::Mean;
  double label_smoothing = 0.0;  // in [0, 1]
};

namespace detail {

// Elementwise losses: input and target of one shape; Reduction::None returns that shape, Mean and Sum shape [].
struct MSELossFunction {
  // (input - target)^2
  Tensor operator()(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean) const;
};

struct L1LossFunction {
  // |input - target|, with gradient sign(input - target) (0 where they are equal)
  Tensor operator()(const Tensor& input, const Tensor& target, Reduction reduction = Reduction::Mean) const;
};

struct SmoothL1LossFunction {
  // With d = |input - target|: 0.5 d^2 / beta where d < beta, else d - 0.5 beta. Errors: beta < 0 or not finite.
  Tensor operator()(const Tensor& input, const Tensor& target, const SmoothL1LossOptions& options = {}) const;
};

struct BCEWithLogitsLossFunction {
  // With x = input (logits), y = target (probabilities, same shape), p = pos_weight, w = weight:
  //   w * ((1 - y) x + (1 + (p - 1) y) softplus(-x)),  softplus(-x) = max(-x, 0) + log(1 + exp(-|x|)),
  // which is w * (max(x, 0) - x y + log(1 + exp(-|x|))) without pos_weight: stable for logits of any size. The
  // gradients are closed-form, w * ((1 + (p - 1) y) sigmoid(x) - p y) for input (exact at x = 0 too).
  // Errors: weight or pos_weight not broadcasting to input's shape.
  Tensor operator()(const Tensor& input, const Tensor& target, const BCEWithLogitsLossOptions& options = {}) const;
};

// Class losses, as PyTorch's. input: [N, C], or [N, C, d1, ...] with the classes along dimension 1 (log-probabilities
// for nll_loss, unnormalized logits for cross_entropy); target: int64 class indices of input's shape without its
// class dimension ([N], or [N, d1, ...]), each in [0, C) or equal to ignore_index. The loss of target element t =
// target[n, d...] is -weight[t] * input[n, t, d...] (for nll_loss); Reduction::None returns these losses in target's
// shape (0 for ignored elements), Sum their sum and Mean their sum divided by the sum of weight[t] over the elements
// not ignored (their count without weights; NaN when every element is ignored, as in PyTorch).
// The targets are read on the host (one copy from the device) to check them.
// Errors: input of fewer than 2 dimensions; a target that is not int64 ("convert with .to(DType::Int64)" where it is
// float32) or not of input's shape without dimension 1; a target out of range, naming its position and value
// ("target[3] is 12 but expected a class index in [0, 10) or ignore_index -100", "target[1, 4] is ..." for a 2-D
// target); weight not float32 [C] on input's device.
struct NLLLossFunction {
  Tensor operator()(const Tensor& input, const Tensor& target, const NLLLossOptions& options = {}) const;
};

// cross_entropy(input, target) = nll_loss(log_softmax(input, 1), target) with label smoothing: with eps =
// label_smoothing and the C classes, target element t = target[n, d...] costs
//   (1 - eps) * nll + eps / C * sum_c (-weight[c] * log_softmax(input)[n, c, d...])
// (weight[c] = 1 without weights), both terms 0 for ignored elements; Mean divides by nll_loss's divisor.
// Class-probability targets: a float32 target of input's shape holds each element's distribution over the classes
// (along dimension 1); its loss is -sum_c weight[c] q[n, c, d...] log_softmax(input)[n, c, d...] with
// q = (1 - eps) target + eps / C, and Mean divides by the number of such distributions (N * d1 * ...). Gradients flow
// to the target too.
// Stable for logits of any size (log_softmax subtracts the maximum over the classes).
// Errors: nll_loss's; label_smoothing outside [0, 1]; a probability target with ignore_index >= 0 (PyTorch refuses
// it too: only class-index targets can be ignored).
struct CrossEntropyLossFunction {
  Tensor operator()(const Tensor& input, const Tensor& target, const CrossEntropyLossOptions& options = {}) const;
};

}  // namespace detail

// The losses (Note [Losses as objects]). mse_loss has the signature of the core op tandem::mse_loss when called with
// two tensors: call it qualified (nn::mse_loss).
inline constexpr detail::MSELossFunction mse_loss{};
inline constexpr detail::L1LossFunction l1_loss{};
inline constexpr detail::SmoothL1LossFunction smooth_l1_loss{};
inline constexpr detail::BCEWithLogitsLossFunction binary_cross_entropy_with_logits{};
inline constexpr detail::NLLLossFunction nll_loss{};
inline constexpr detail::CrossEntropyLossFunction cross_entropy{};

}  // namespace tandem::nn
