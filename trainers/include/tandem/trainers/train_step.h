#pragma once
// One data-parallel training step on replicas kept alive across steps.

#include "tandem/core/tensor.h"
#include "tandem/parallel/replicated.h"

namespace tandem::trainers {

// One SGD step on the batch (features [n, ...], targets [n, ...], any device) with the mean squared error:
//   1. features and targets are scattered over model.devices() (chunk i to replica i; fewer chunks than devices
//      when n is smaller than the number of devices);
//   2. the replicas run in parallel and each takes the loss of its chunk, weighted by its share of the batch,
//      loss_i = mse(output_i, targets_i) * n_i / n, so that the summed gradient is the gradient of the full-batch
//      mean loss (the same as one device);
//   3. one backward over all the losses, the replicas' gradients summed (model.reduce_gradients()), and an
//      identical SGD step on every replica.
// Returns the batch's mean loss, sum_i loss_i (a scalar on devices[0]; reading it waits for the step).
Tensor train_step(parallel::ReplicatedModule& model, parallel::ReplicatedSGD& optimizer, const Tensor& features,
                  const Tensor& targets);

}  // namespace tandem::trainers
