#include "tandem/nn/clip_grad.h"

#include <cmath>
#include <map>

#include "tandem/core/error.h"
#include "tandem/core/fused.h"
#include "tandem/core/grad_mode.h"

namespace tandem::nn::utils {

Tensor clip_grad_norm_(const std::vector<Tensor>& parameters, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  TANDEM_CHECK(max_norm >= 0.0, "nn::utils::clip_grad_norm_: max_norm must be >= 0, got ", max_norm);
  TANDEM_CHECK(norm_type > 0.0, "nn::utils::clip_grad_norm_: norm_type must be > 0 (or infinity), got ", norm_type);
  std::vector<Tensor> grads;
  for (size_t i = 0; i < parameters.size(); ++i) {
    TANDEM_CHECK(parameters[i].defined(), "nn::utils::clip_grad_norm_: parameter ", i, " is undefined");
    parameters[i].check_grad("nn::utils::clip_grad_norm_");  // Note [Gradient checks] in tandem/core/tensor.h
    Tensor grad = parameters[i].grad();
    if (grad.defined()) grads.push_back(std::move(grad));
  }
  if (grads.empty()) return Tensor::scalar(0.0f);
  NoGradGuard no_grad;
  const Tensor total = total_norm(grads, norm_type);
  if (error_if_nonfinite) {
    const float value = total.item();
    TANDEM_CHECK(std::isfinite(value), "nn::utils::clip_grad_norm_: the total norm of order ", norm_type,
                 " of the gradients is ", value, ", so they cannot be clipped (error_if_nonfinite)");
  }
  std::map<Device, Tensor> total_on{{total.device(), total}};  // copied once to each other device
  for (const Tensor& grad : grads) {
    auto [entry, added] = total_on.try_emplace(grad.device());
    if (added) entry->second = total.to(grad.device());
    clip_by_norm_(grad, entry->second, static_cast<float>(max_norm));
  }
  return total;
}

}  // namespace tandem::nn::utils
