#pragma once
// One data-parallel training step on replicas kept alive across steps: within one process (ReplicatedModule), or as
// one process of a group (DistributedDataParallel).

#include <functional>

#include "tandem/core/tensor.h"
#include "tandem/nn/loss.h"
#include "tandem/parallel/distributed.h"
#include "tandem/parallel/replicated_optimizer.h"
#include "tandem/parallel/weighted_step.h"
#include "tandem/trainers/loader.h"
#include "tandem/trainers/tensor_loader.h"

namespace tandem::trainers {

// A training loss: a one-element tensor from a model's output and the targets of the same rows. For the step to match
// one device, it must be a mean over the rows (as nn::mse_loss is).
using LossFunction = parallel::LossFunction;

// One optimizer step on the batch (features [n, ...], targets [n, ...], any device) with the loss (by default the
// mean squared error):
//   1. features and targets are scattered over model.devices() (chunk i to replica i; fewer chunks than devices
//      when n is smaller than the number of devices);
//   2. each replica, on its device's worker thread, runs forward, takes the loss of its chunk weighted by its share
//      of the batch, loss_i = loss(output_i, targets_i) * n_i / n (so that the summed gradient is the gradient of
//      the full-batch mean loss, as on one device), and runs its backward (model.forward_backward);
//   3. the replicas' gradients are summed, bucket by bucket as backward finishes them, and every replica takes the
//      same optimizer step.
// Returns the batch's mean loss, sum_i loss_i (a scalar on devices[0]; reading it waits for the step). The body is
// parallel::data_parallel_step (weighted_step.h), which parallel::CapturedStep replays as a CUDA graph.
// Errors: features and targets with different numbers of rows; a loss that is not one element (naming its shape).
Tensor train_step(parallel::ReplicatedModule& model, parallel::ReplicatedOptimizer& optimizer, const Tensor& features,
                  const Tensor& targets, const LossFunction& loss = nn::mse_loss);

// The same step as one process of a group: `batch` is this process's shard of a global batch (a DataLoader with a
// DistributedSampler for model.group()); chunk i, batch.device_rows[i] rows, goes to the group's device i, and its
// loss is weighted by its share of the GLOBAL batch, loss_i = loss(output_i, targets_i) * n_i / batch.global_rows.
// The model reduces with ReduceOp::Sum, so every device of every process ends with the gradient of the global
// batch's mean loss: the step equals one process's step over every device of the group (Note [Sharding per global
// batch] in distributed_sampler.h). A process without rows in this batch still takes part (zero gradients).
// Returns this process's part of the global batch's mean loss, sum_i loss_i over its replicas (a scalar on the
// group's first device; zero without rows): the sum over the processes is the global batch's mean loss.
// Errors: a model that does not reduce with ReduceOp::Sum; device_rows that do not add up to the batch's rows, hold
// more entries than the group has devices, or an entry below 1; a global_rows below the batch's rows; the loss
// errors above.
Tensor train_step(parallel::DistributedDataParallel& model, parallel::ReplicatedOptimizer& optimizer,
                  const Batch& batch, const LossFunction& loss = nn::mse_loss);

// The same two steps on a batch already on the devices, as a TensorDataLoader over {features, targets} with the
// model's devices (and, for a group, DistributedSampler(*model.group())) gives it: batch.parts[i] = {features,
// targets} of device i's chunk, on the model's i-th device, batch.device_rows[i] its rows, batch.global_rows the rows
// of the (global) batch. The steps equal those above on the same rows, without their scatter.
// Errors: those above; parts that are not two tensors on the model's devices in order, with device_rows[i] rows
// each; for ReplicatedModule, a global_rows other than the batch's rows or a batch without rows.
Tensor train_step(parallel::ReplicatedModule& model, parallel::ReplicatedOptimizer& optimizer, const TensorBatch& batch,
                  const LossFunction& loss = nn::mse_loss);
Tensor train_step(parallel::DistributedDataParallel& model, parallel::ReplicatedOptimizer& optimizer,
                  const TensorBatch& batch, const LossFunction& loss = nn::mse_loss);

}  // namespace tandem::trainers
