#include "tandem/parallel/weighted_step.h"

#include "tandem/comm/comm.h"
#include "tandem/core/error.h"
#include "tandem/core/grad_mode.h"
#include "tandem/core/ops.h"
#include "tandem/parallel/steps_in_backward.h"

namespace tandem::parallel {
namespace {

// Note [Weighting by the seed]: replica i's loss counts in the step as w_i * loss_i, w_i = rows_i / global_rows. Its
// gradients are those of loss_i scaled by w_i, and backward delivers exactly that when it starts from w_i in place of
// one: the product's backward would pass 1 * w_i, the same float, to loss_i's backward. So the product is never part
// of the autograd graph: its forward (a scale kernel) is taken on the detached loss only to return the weighted value,
// and not at all when w_i is 1 (one replica), and its backward and the seed's fill of ones are gone. Results are
// bitwise those of backward over w_i * loss_i.
auto checked_loss(const std::vector<Tensor>& labels, const LossFunction& loss) {
  return [&labels, &loss](size_t i, const Tensor& output) {
    Tensor value = loss(output, labels[i]);
    TANDEM_CHECK(value.defined() && value.numel() == 1, "train_step: the loss of replica ", i, " has shape ",
                 value.defined() ? to_string(value.shape()) : "(undefined)", " but expected one element");
    return value;
  };
}

float weight_of(const Tensor& labels, int64_t global_rows) {
  return static_cast<float>(labels.size(0)) / static_cast<float>(global_rows);
}

}  // namespace

std::vector<Tensor> weighted_losses(std::vector<Tensor> losses, const std::vector<Tensor>& labels,
                                    int64_t global_rows) {
  NoGradGuard no_grad;
  for (size_t i = 0; i < losses.size(); ++i) {
    const float weight = weight_of(labels[i], global_rows);
    if (weight != 1.0f) losses[i] = losses[i] * weight;
  }
  return losses;
}

void check_batch_rows(const Tensor& features, const Tensor& targets, const char* caller) {
  TANDEM_CHECK(features.dim() >= 1 && targets.dim() >= 1 && features.size(0) == targets.size(0), caller,
               ": features of shape ", to_string(features.shape()), " and targets of shape ",
               to_string(targets.shape()), " but expected the same number of rows");
}

std::vector<Tensor> loss_weights(const std::vector<Tensor>& labels, int64_t global_rows) {
  NoGradGuard no_grad;
  std::vector<Tensor> weights;
  for (const Tensor& chunk : labels) weights.push_back(Tensor::scalar(weight_of(chunk, global_rows), chunk.device()));
  return weights;
}

std::vector<Tensor> weighted_forward_backward(ReplicatedModule& model, const std::vector<Tensor>& inputs,
                                              const std::vector<Tensor>& labels, int64_t global_rows,
                                              const LossFunction& loss, ReplicaThreads threads,
                                              const std::vector<Tensor>& weights,
                                              const GradientReducer::BucketStarted& bucket_started) {
  // Each replica weights its own loss, on its own thread, before its backward: the scale kernels are issued side by
  // side instead of one after another on the calling thread after the step.
  std::vector<Tensor> losses(inputs.size());
  observed_forward_backward(
      model, inputs, labels, global_rows, loss, threads, weights,
      [&](size_t i, const Tensor& value) { losses[i] = weighted_losses({value}, {labels[i]}, global_rows).front(); },
      bucket_started);
  return losses;
}

void observed_forward_backward(ReplicatedModule& model, const std::vector<Tensor>& inputs,
                               const std::vector<Tensor>& labels, int64_t global_rows, const LossFunction& loss,
                               ReplicaThreads threads, const std::vector<Tensor>& weights, const LossObserver& on_loss,
                               const GradientReducer::BucketStarted& bucket_started) {
  model.zero_grad();
  if (inputs.empty() && model.spans_processes()) {
    // Note [A process without rows] in distributed.cpp: it runs nothing but takes part in every bucket's collective.
    model.prepare_for_backward(0);
    model.reduce_gradients();
    return;
  }
  const std::vector<Tensor> seeds = weights.empty() ? loss_weights(labels, global_rows) : weights;
  const auto checked = checked_loss(labels, loss);
  const auto observed = [&checked, &on_loss](size_t i, const Tensor& output) {
    Tensor value = checked(i, output);
    on_loss(i, value.detach());
    return value;
  };
  (void)model.forward_backward(inputs, observed, /*reduce=*/true, threads, seeds, bucket_started);
}

std::vector<Tensor> weighted_training_step(ReplicatedModule& model, ReplicatedOptimizer& optimizer,
                                           const std::vector<Tensor>& inputs, const std::vector<Tensor>& labels,
                                           int64_t global_rows, const LossFunction& loss, StepForm form,
                                           ReplicaThreads threads, const std::vector<Tensor>& weights,
                                           const LossObserver& on_loss) {
  TANDEM_CHECK(&optimizer.model() == &model, "train_step: the optimizer was built over another ReplicatedModule than ",
               "the model it steps");
  std::vector<Tensor> losses(inputs.size());
  const LossObserver weigh = [&](size_t i, const Tensor& value) {
    losses[i] = weighted_losses({value}, {labels[i]}, global_rows).front();
  };
  const LossObserver& observe = on_loss ? on_loss : weigh;
  if (!optimizer.steps_in_backward()) {
    observed_forward_backward(model, inputs, labels, global_rows, loss, threads, weights, observe);
    if (form == StepForm::Replayable) {
      optimizer.replayable_step();
    } else {
      optimizer.step();
    }
    return losses;
  }
  // Note [Optimizer steps in backward] in steps_in_backward.h.
  StepsInBackward steps(optimizer, form);
  observed_forward_backward(model, inputs, labels, global_rows, loss, threads, weights, observe,
                            [&steps](size_t bucket) { steps.bucket_started(bucket); });
  steps.finish();
  return losses;
}

std::vector<Tensor> weighted_forward_backward(DistributedDataParallel& model, const std::vector<Tensor>& inputs,
                                              const std::vector<Tensor>& labels, int64_t global_rows,
                                              const LossFunction& loss) {
  model.zero_grad();
  return weighted_losses(model.forward_backward(inputs, checked_loss(labels, loss), loss_weights(labels, global_rows)),
                         labels, global_rows);
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
  // One scatter for both: their copies share the stream waits.
  const std::vector<std::vector<Tensor>> chunks = comm::scatter_all({features, targets}, model.devices());
  return placed_data_parallel_step(model, optimizer, chunks[0], chunks[1], features.size(0), loss);
}

Tensor placed_data_parallel_step(ReplicatedModule& model, ReplicatedOptimizer& optimizer,
                                 const std::vector<Tensor>& inputs, const std::vector<Tensor>& labels, int64_t rows,
                                 const LossFunction& loss) {
  const std::vector<Tensor> losses =
      weighted_training_step(model, optimizer, inputs, labels, rows, loss, StepForm::Eager);
  return sum_losses(losses, model.devices().front());
}

}  // namespace tandem::parallel
