#pragma once
// One data-parallel training step on replicas kept alive across steps.

#include "tandem/core/tensor.h"
#include "tandem/parallel/replicated.h"

namespace tandem::trainers {

// One SGD step on the batch (features [n, ...], targets [n, ...], any device) with the mean squared error:
//   1. features and targets are scattered over model.devices() (chunk i to replica i; fewer chunks than devices
//      when n is smaller than the number of devices);
//   2. each replica, on its device's worker thread, runs forward, takes the loss of its chunk weighted by its share
//      of the batch, loss_i = mse(output_i, targets_i) * n_i / n (so that the summed gradient is the gradient of
//      the full-batch mean loss, as on one device), and runs its backward (model.forward_backward);
//   3. the replicas' gradients are summed, bucket by bucket as backward finishes them, and every replica takes the
//      same SGD step.
// Returns the batch's mean loss, sum_i loss_i (a scalar on devices[0]; reading it waits for the step).
Tensor train_step(parallel::ReplicatedModule& model, parallel::ReplicatedSGD& optimizer, const Tensor& features,
                  const Tensor& targets);

}  // namespace tandem::trainers
