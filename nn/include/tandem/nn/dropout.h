#pragma once
// nn::Dropout: zeroes each element with probability p while training and scales the rest by 1 / (1 - p), so that
// the expected output equals the input; the identity in eval mode (and for p = 0).

#include <string>

#include "tandem/nn/module.h"

namespace tandem::nn {

// torch.nn.functional.dropout: with `training` and p > 0, each element zeroed with probability p and the rest scaled
// by 1 / (1 - p) (Note [Dropout masks]); otherwise the input itself. Errors: an undefined input; p outside [0, 1).
Tensor dropout(const Tensor& input, double p, bool training = true);

class Dropout : public Cloneable<Dropout> {
 public:
  // Errors: p outside [0, 1) (or NaN).
  explicit Dropout(double p = 0.5);

  // Note [Dropout masks]: the mask is drawn with Tensor::rand on the input's device from the calling thread's
  // generator stream (Note [Generator streams] in core/random.h): a replica's forward on its device's worker draws
  // from that device's stream, so masks are reproducible under manual_seed however the workers interleave. On a GPU
  // the uniform values are computed there, bitwise the host's (no copy, no synchronization), and a captured CUDA graph
  // draws new ones at each replay (Note [Random draws in captured graphs] in core/random.h); the comparison with p and
  // the scaling run on the device.
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;

  double p() const { return p_; }

 private:
  double p_;
};

}  // namespace tandem::nn
