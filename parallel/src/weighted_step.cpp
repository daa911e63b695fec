#include "tandem/parallel/weighted_step.h"

#include "tandem/comm/comm.h"
#include "tandem/core/error.h"
#include "tandem/core/grad_mode.h"
#include "tandem/core/ops.h"

namespace tandem::parallel {
namespace {

// Replica i's loss, weighted by its chunk's share of the batch.
auto weighted_loss(const std::vector<Tensor>& labels, int64_t global_rows, const LossFunction& loss) {
  return [&labels, global_rows, &loss](size_t i, const Tensor& output) {
    const Tensor value = loss(output, labels[i]);
    TANDEM_CHECK(value.defined() && value.numel() == 1, "train_step: the loss of replica ", i, " has shape ",
                 value.defined() ? to_string(value.shape()) : "(undefined)", " but expected one element");
    return value * (static_cast<float>(labels[i].size(0)) / static_cast<float>(global_rows));
  };
}

}  // namespace

void check_batch_rows(const Tensor& features, const Tensor& targets, const char* caller) {
  TANDEM_CHECK(features.dim() >= 1 && targets.dim() >= 1 && features.size(0) == targets.size(0), caller,
               ": features of shape ", to_string(features.shape()), " and targets of shape ",
               to_string(targets.shape()), " but expected the same number of rows");
}

std::vector<Tensor> weighted_forward_backward(ReplicatedModule& model, const std::vector<Tensor>& inputs,
                                              const std::vector<Tensor>& labels, int64_t global_rows,
                                              const LossFunction& loss, ReplicaThreads threads) {
  model.zero_grad();
  return model.forward_backward(inputs, weighted_loss(labels, global_rows, loss), /*reduce=*/true, threads);
}

std::vector<Tensor> weighted_forward_backward(DistributedDataParallel& model, const std::vector<Tensor>& inputs,
                                              const std::vector<Tensor>& labels, int64_t global_rows,
                                              const LossFunction& loss) {
  model.zero_grad();
  return model.forward_backward(inputs, weighted_loss(labels, global_rows, loss));
}

Tensor sum_losses(const std::vector<Tensor>& losses, Device device) {
  NoGradGuard no_grad;
  if (losses.empty()) return Tensor::zeros({}, device);  // a process without rows in this batch
  Tensor total = losses.front().detach().reshape({});
  for (size_t i = 1; i < losses.size(); ++i) total = total + losses[i].detach().reshape({}).to(device);
  return total;
}

Tensor data_parallel_step(ReplicatedModule& model, ReplicatedOptimizer& optimizer, const Tensor& features,
                          const Tensor& targets, const LossFunction& loss) {
  check_batch_rows(features, targets, "train_step");
  return placed_data_parallel_step(model, optimizer, comm::scatter(features, model.devices()),
                                   comm::scatter(targets, model.devices()), features.size(0), loss);
}

Tensor placed_data_parallel_step(ReplicatedModule& model, ReplicatedOptimizer& optimizer,
                                 const std::vector<Tensor>& inputs, const std::vector<Tensor>& labels, int64_t rows,
                                 const LossFunction& loss) {
  const std::vector<Tensor> losses = weighted_forward_backward(model, inputs, labels, rows, loss);
  optimizer.step();
  return sum_losses(losses, model.devices().front());
}

}  // namespace tandem::parallel
