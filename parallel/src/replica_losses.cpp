#include "replica_losses.h"

#include "tandem/core/error.h"
#include "tandem/core/grad_mode.h"
#include "tandem/core/ops.h"

namespace tandem::parallel::detail {
namespace {

float weight_of(const Tensor& labels, int64_t global_rows) {
  return static_cast<float>(labels.size(0)) / static_cast<float>(global_rows);
}

}  // namespace

std::vector<Tensor> loss_weights(const std::vector<Tensor>& labels, int64_t global_rows) {
  NoGradGuard no_grad;
  std::vector<Tensor> weights;
  for (const Tensor& chunk : labels) weights.push_back(Tensor::scalar(weight_of(chunk, global_rows), chunk.device()));
  return weights;
}

std::vector<Tensor> weighted_losses(std::vector<Tensor> losses, const std::vector<Tensor>& labels,
                                    int64_t global_rows) {
  NoGradGuard no_grad;
  for (size_t i = 0; i < losses.size(); ++i) {
    const float weight = weight_of(labels[i], global_rows);
    if (weight != 1.0f) losses[i] = losses[i] * weight;
  }
  return losses;
}

Tensor sum_losses(const std::vector<Tensor>& losses, Device device) {
  NoGradGuard no_grad;
  if (losses.empty()) return Tensor::zeros({}, device);  // a process without rows in this batch
  Tensor total = losses.front().detach().reshape({});
  for (size_t i = 1; i < losses.size(); ++i) total = total + losses[i].detach().reshape({}).to(device);
  return total;
}

void check_loss_value(size_t replica, const Tensor& loss) {
  TANDEM_CHECK(loss.defined() && loss.numel() == 1, "parallel::TrainingStep::step: the loss of replica ", replica,
               " has shape ", loss.defined() ? to_string(loss.shape()) : "(undefined)", " but expected one element");
}

}  // namespace tandem::parallel::detail
