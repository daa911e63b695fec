#include "tandem/trainers/train_step.h"

#include "tandem/comm/comm.h"
#include "tandem/core/autograd.h"
#include "tandem/core/error.h"
#include "tandem/core/grad_mode.h"
#include "tandem/core/ops.h"
#include "tandem/nn/loss.h"

namespace tandem::trainers {

Tensor train_step(parallel::ReplicatedModule& model, parallel::ReplicatedSGD& optimizer, const Tensor& features,
                  const Tensor& targets) {
  TANDEM_CHECK(features.dim() >= 1 && targets.dim() >= 1 && features.size(0) == targets.size(0), "train_step: ",
               "features of shape ", to_string(features.shape()), " and targets of shape ",
               to_string(targets.shape()), " but expected the same number of rows");
  const int64_t rows = features.size(0);
  optimizer.zero_grad();
  const std::vector<Tensor> inputs = comm::scatter(features, model.devices());
  const std::vector<Tensor> labels = comm::scatter(targets, model.devices());
  const std::vector<Tensor> outputs = model.forward(inputs);

  std::vector<Tensor> losses;
  for (size_t i = 0; i < outputs.size(); ++i) {
    const float share = static_cast<float>(labels[i].size(0)) / static_cast<float>(rows);
    losses.push_back(nn::mse_loss(outputs[i], labels[i]) * share);
  }
  autograd::backward(losses);
  model.reduce_gradients();
  optimizer.step();

  NoGradGuard no_grad;
  Tensor total = losses.front().detach();
  for (size_t i = 1; i < losses.size(); ++i) total = total + losses[i].detach().to(total.device());
  return total;
}

}  // namespace tandem::trainers
