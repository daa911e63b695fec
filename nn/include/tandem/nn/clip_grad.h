#pragma once
// nn::utils::clip_grad_norm_, as torch.nn.utils.clip_grad_norm_: rescales the gradients of `parameters` together so
// that their total norm is at most max_norm.
//   total = the norm_type-norm of the vector of each gradient's norm (= of all gradient elements together;
//           norm_type = infinity: the largest magnitude)
//   every gradient *= min(max_norm / (total + 1e-6), 1)
// Returns total (shape {}, float32) on the first gradient's device; a CPU zero when no parameter has a gradient.
// Parameters without a gradient are skipped; gradients may live on several devices. Nothing waits for a device
// unless error_if_nonfinite, which reads the total on the host and throws before any gradient is changed when it is
// NaN or infinite (otherwise such a total makes the gradients NaN or zero, as in PyTorch).
// Every parameter's gradient check runs first, as an optimizer's step runs it (Note [Gradient checks] in
// tandem/core/tensor.h): a data-parallel module's gradients that are not reduced yet, or only reduce-scattered
// (DistributedOptions::zero_stage >= 1), are refused with its message.
// Errors: an undefined parameter; max_norm < 0 or NaN; norm_type not > 0; those of the gradient checks.

#include <vector>

#include "tandem/core/tensor.h"

namespace tandem::nn::utils {

Tensor clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

}  // namespace tandem::nn::utils
