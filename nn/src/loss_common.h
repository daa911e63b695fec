#pragma once
// The checks and reductions that the loss functions share.

#include "tandem/nn/loss_functions.h"

namespace tandem::nn::detail {

// Throws Error naming `caller` unless input and target are both defined.
void check_defined(const char* caller, const Tensor& input, const Tensor& target);
// Throws Error naming `caller` and `what` unless `tensor` is float32.
void check_float32(const char* caller, const Tensor& tensor, const char* what);
// Throws Error naming `caller` and `what` unless `tensor` lives on input's device.
void check_on_input_device(const char* caller, const Tensor& input, const Tensor& tensor, const char* what);
// The checks of an elementwise loss: both defined, float32, on one device, of one shape.
void check_elementwise(const char* caller, const Tensor& input, const Tensor& target);
// The checks of a weight option (undefined means none): float32, on input's device, not requiring grad.
void check_weight(const char* caller, const Tensor& input, const Tensor& weight, const char* what);

// Per-element losses reduced: as they are (None), their sum or their mean. Error naming `caller` for a reduction
// outside the enum.
Tensor reduce(const char* caller, const Tensor& losses, Reduction reduction);
// Per-row losses reduced, Mean dividing their sum by `divisor` (NaN when it is 0, as 0 / 0).
Tensor reduce(const char* caller, const Tensor& losses, Reduction reduction, double divisor);
// The same with the divisor a one-element float32 tensor on the losses' device (no gradient), read there.
Tensor reduce(const char* caller, const Tensor& losses, Reduction reduction, const Tensor& divisor);

}  // namespace tandem::nn::detail
