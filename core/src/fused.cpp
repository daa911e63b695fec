#include "tandem/core/fused.h"

#include "backend.h"
#include "raw_ops.h"
#include "tandem/core/error.h"

namespace tandem {

void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdUpdate& update) {
  raw::check_defined("sgd_update", param, "param");
  raw::check_defined("sgd_update", grad, "grad");
  raw::check_same_device("sgd_update", param, grad);
  TANDEM_CHECK(param.shape() == grad.shape(), "sgd_update: param has shape ", to_string(param.shape()),
               " but grad has shape ", to_string(grad.shape()));
  TANDEM_CHECK(param.is_contiguous() && grad.is_contiguous(), "sgd_update: param and grad must be contiguous");
  if (update.momentum != 0.0f) {
    raw::check_defined("sgd_update", momentum_buffer, "momentum_buffer");
    raw::check_same_device("sgd_update", param, momentum_buffer);
    TANDEM_CHECK(momentum_buffer.shape() == param.shape() && momentum_buffer.is_contiguous(),
                 "sgd_update: momentum_buffer has shape ", to_string(momentum_buffer.shape()), " but expected ",
                 to_string(param.shape()), " (contiguous)");
  }
  if (param.numel() == 0) return;
  backend::for_device(param.device()).sgd_update(param, grad, momentum_buffer, update);
}

}  // namespace tandem
