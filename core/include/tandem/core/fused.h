#pragma once
// Fused, non-differentiable in-place updates used by optimizers (one kernel per parameter, no host sync).

#include "tandem/core/tensor.h"

namespace tandem {

// torch.optim.SGD's rule for one parameter:
//   d = grad + weight_decay * param
//   buf = first_step ? d : momentum * buf + (1 - dampening) * d      (only when momentum != 0)
//   d = nesterov ? d + momentum * buf : buf                           (only when momentum != 0)
//   param -= lr * d
struct SgdUpdate {
  float lr = 0.01f;
  float momentum = 0.0f;
  float dampening = 0.0f;
  float weight_decay = 0.0f;
  bool nesterov = false;
  bool first_step = true;
};

// param, grad and (when momentum != 0) momentum_buffer: contiguous, equal shapes, one device. Never recorded.
void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdUpdate& update);

}  // namespace tandem
