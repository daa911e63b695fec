#pragma once
// nn::Dropout: zeroes each element with probability p while training and scales the rest by 1 / (1 - p), so that
// the expected output equals the input; the identity in eval mode (and for p = 0). nn::Dropout2d does the same to
// whole channels of images.

#include <string>

#include "tandem/nn/module.h"

namespace tandem::nn {

// torch.nn.functional.dropout: with `training` and p > 0, each element zeroed with probability p and the rest scaled
// by 1 / (1 - p) (Note [Dropout masks]); otherwise the input unchanged. Errors: an undefined input; p outside [0, 1).
Tensor dropout(const Tensor& input, double p, bool training = true);

namespace detail {
// Throws Error naming `caller` unless p is in [0, 1) (NaN is not).
void check_dropout_p(const char* caller, double p);
}  // namespace detail

// What Dropout and Dropout2d share: the probability p, checked when the layer is made.
template <class Self>
class DropoutBase : public Cloneable<Self> {
 public:
  std::string extra_repr() const override { return "p=" + std::to_string(p_); }

  double p() const { return p_; }

 protected:
  // Errors (naming `layer`): p outside [0, 1) (or NaN).
  DropoutBase(const char* layer, double p) : p_(p) { detail::check_dropout_p(layer, p); }

 private:
  double p_;
};

class Dropout : public DropoutBase<Dropout> {
 public:
  // Errors: p outside [0, 1) (or NaN).
  explicit Dropout(double p = 0.5) : DropoutBase("nn::Dropout", p) {}

  // Note [Dropout masks]: the mask is drawn with Tensor::rand on the input's device from the calling thread's
  // generator stream (Note [Generator streams] in core/random.h): a replica's forward on its device's worker draws
  // from that device's stream, so masks are reproducible under manual_seed however the workers interleave. On a GPU
  // the uniform values are computed there, bitwise the host's (no copy, no synchronization), and a captured CUDA graph
  // draws new ones at each replay (Note [Random draws in captured graphs] in core/random.h); the comparison with p and
  // the scaling run on the device.
  Tensor forward(const Tensor& input) override;
};

// torch.nn.functional.dropout2d for an input [N, C, H, W] or unbatched [C, H, W]: with `training` and p > 0, each
// channel (each (n, c) plane of H x W values) zeroed as a whole with probability p and the rest scaled by
// 1 / (1 - p); the mask has shape [N, C, 1, 1] ([C, 1, 1] unbatched) and is drawn as nn::Dropout's (Note [Dropout
// masks]); otherwise the input unchanged. An unbatched [C, H, W] input is C channels, the meaning PyTorch documents
// (PyTorch 2.x still treats a 3-D input as [N, C, L] with a warning). Errors: an undefined input; an input neither
// 3-D nor 4-D (in every mode); p outside [0, 1).
Tensor dropout2d(const Tensor& input, double p, bool training = true);

// torch.nn.Dropout2d: nn::dropout2d while training, the identity in eval mode.
class Dropout2d : public DropoutBase<Dropout2d> {
 public:
  // Errors: p outside [0, 1) (or NaN).
  explicit Dropout2d(double p = 0.5) : DropoutBase("nn::Dropout2d", p) {}

  // Errors: those of nn::dropout2d, naming nn::Dropout2d.
  Tensor forward(const Tensor& input) override;
};

}  // namespace tandem::nn
