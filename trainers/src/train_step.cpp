#include "tandem/trainers/train_step.h"

#include "tandem/comm/comm.h"
#include "tandem/core/autograd.h"
#include "tandem/core/error.h"
#include "tandem/core/grad_mode.h"
#include "tandem/core/ops.h"

namespace tandem::trainers {

Tensor train_step(parallel::ReplicatedModule& model, parallel::ReplicatedOptimizer& optimizer, const Tensor& features,
                  const Tensor& targets, const LossFunction& loss) {
  TANDEM_CHECK(features.dim() >= 1 && targets.dim() >= 1 && features.size(0) == targets.size(0), "train_step: ",
               "features of shape ", to_string(features.shape()), " and targets of shape ",
               to_string(targets.shape()), " but expected the same number of rows");
  const int64_t rows = features.size(0);
  optimizer.zero_grad();
  const std::vector<Tensor> inputs = comm::scatter(features, model.devices());
  const std::vector<Tensor> labels = comm::scatter(targets, model.devices());
  // Each replica's loss is its chunk's mean weighted by the chunk's share of the rows, so the summed gradients are
  // the gradient of the mean over the whole batch.
  const std::vector<Tensor> losses = model.forward_backward(inputs, [&](size_t i, const Tensor& output) {
    const Tensor value = loss(output, labels[i]);
    TANDEM_CHECK(value.defined() && value.numel() == 1, "train_step: the loss of replica ", i, " has shape ",
                 value.defined() ? to_string(value.shape()) : "(undefined)", " but expected one element");
    return value * (static_cast<float>(labels[i].size(0)) / static_cast<float>(rows));
  });
  optimizer.step();

  NoGradGuard no_grad;
  Tensor total = losses.front().detach();
  for (size_t i = 1; i < losses.size(); ++i) total = total + losses[i].detach().to(total.device());
  return total;
}

}  // namespace tandem::trainers
