#include "tandem/core/autograd.h"

namespace tandem::autograd {

void zero_grad(const std::vector<Tensor>& tensors, bool set_to_none) {
  NoGradGuard no_grad;
  for (const Tensor& tensor : tensors) {
    Tensor grad = tensor.grad();
    if (!grad.defined()) continue;
    if (set_to_none) {
      tensor.set_grad(Tensor());
    } else {
      grad.zero_();
    }
  }
}

}  // namespace tandem::autograd
