#pragma once
// The body of a data-parallel training step on replicas kept alive across steps, each replica's loss weighted by its
// share of the batch: one home for what trainers::train_step and parallel::CapturedStep both run.

#include <cstdint>
#include <functional>
#include <vector>

#include "tandem/core/device.h"
#include "tandem/core/tensor.h"
#include "tandem/nn/loss.h"
#include "tandem/parallel/distributed.h"
#include "tandem/parallel/parallel_apply.h"
#include "tandem/parallel/replicated.h"
#include "tandem/parallel/replicated_optimizer.h"

namespace tandem::parallel {

// A training loss: a one-element tensor from a model's output and the targets of the same rows. For the step to match
// one device, it must be a mean over the rows (as nn::mse_loss is).
using LossFunction = std::function<Tensor(const Tensor& output, const Tensor& target)>;

// Throws "<caller>: features of shape [..] and targets of shape [..] but expected the same number of rows" unless
// both have a first dimension of the same size.
void check_batch_rows(const Tensor& features, const Tensor& targets, const char* caller);

// Zeroes the gradients, then runs each replica i on inputs[i]: forward, its loss weighted by its chunk's share of
// `global_rows`, loss_i = loss(output_i, labels[i]) * rows_i / global_rows (so that the summed gradients are the
// gradient of the mean over the whole batch), and backward; the replicas' gradients are summed (forward_backward).
// The weight is the seed of replica i's backward, not a product in its graph (Note [Weighting by the seed] in
// weighted_step.cpp). Returns the weighted losses, detached. Errors: a loss that is not one element ("train_step: the
// loss of replica i has shape ..."); forward_backward's.
// `weights`: loss_weights(labels, global_rows) made beforehand (a captured step keeps them static), or empty to make
// them here.
// `bucket_started`: forward_backward's callback for each bucket whose sum starts during backward.
// No inputs is allowed for a model whose gradients are reduced across processes (a process without rows in this
// batch): it takes part in the reduction with zero gradients, as DistributedDataParallel::forward_backward does.
std::vector<Tensor> weighted_forward_backward(ReplicatedModule& model, const std::vector<Tensor>& inputs,
                                              const std::vector<Tensor>& labels, int64_t global_rows,
                                              const LossFunction& loss,
                                              ReplicaThreads threads = ReplicaThreads::Workers,
                                              const std::vector<Tensor>& weights = {},
                                              const GradientReducer::BucketStarted& bucket_started = {});
// weighted_forward_backward's gradients, but each replica's loss (detached, not weighted) goes to on_loss(i, loss_i)
// on the thread that runs replica i, right after it is computed and before the replica's backward is issued, so that
// work on the losses is issued side by side (weighted_forward_backward weights them there) or off the path from the
// backwards through the reduction to the optimizer (Note [Losses off the critical path] in captured_step.cpp).
// Nothing is returned. Errors: as weighted_forward_backward.
using LossObserver = std::function<void(size_t replica, const Tensor& loss)>;
void observed_forward_backward(ReplicatedModule& model, const std::vector<Tensor>& inputs,
                               const std::vector<Tensor>& labels, int64_t global_rows, const LossFunction& loss,
                               ReplicaThreads threads, const std::vector<Tensor>& weights, const LossObserver& on_loss,
                               const GradientReducer::BucketStarted& bucket_started = {});

// weighted_forward_backward and the optimizer's step in `form` (optimizer.step() or optimizer.replayable_step()): the
// step of trainers::train_step and of CapturedStep's capture. When optimizer.steps_in_backward(), each bucket's
// parameters are updated as soon as its sum has started, while backward goes on (Note [Optimizer steps in backward]
// in steps_in_backward.h), with bitwise the same results. Returns the weighted losses, detached; with `on_loss`, the
// losses go to it instead, as in observed_forward_backward, and the returned tensors are undefined. Errors: an
// optimizer over another model ("train_step: ..."); those of weighted_forward_backward and of the optimizer's step.
std::vector<Tensor> weighted_training_step(ReplicatedModule& model, ReplicatedOptimizer& optimizer,
                                           const std::vector<Tensor>& inputs, const std::vector<Tensor>& labels,
                                           int64_t global_rows, const LossFunction& loss, StepForm form,
                                           ReplicaThreads threads = ReplicaThreads::Workers,
                                           const std::vector<Tensor>& weights = {}, const LossObserver& on_loss = {});
std::vector<Tensor> weighted_forward_backward(DistributedDataParallel& model, const std::vector<Tensor>& inputs,
                                              const std::vector<Tensor>& labels, int64_t global_rows,
                                              const LossFunction& loss);

// Each chunk's share of the batch, rows_i / global_rows, as a float32 scalar on the chunk's device: the gradient that
// replica i's backward starts from (Note [Weighting by the seed] in weighted_step.cpp).
std::vector<Tensor> loss_weights(const std::vector<Tensor>& labels, int64_t global_rows);

// The replicas' losses (detached), each weighted by its chunk's share, rows_i / global_rows (Note [Weighting by the
// seed] in weighted_step.cpp): loss_i * w_i on loss_i's device, or loss_i itself where w_i is 1 (one replica).
std::vector<Tensor> weighted_losses(std::vector<Tensor> losses, const std::vector<Tensor>& labels, int64_t global_rows);

// The sum of the weighted losses as a scalar on `device` (zero for no losses: a process without rows).
Tensor sum_losses(const std::vector<Tensor>& losses, Device device);

// The whole eager step of trainers::train_step (see there): features and targets scattered over model.devices(),
// then placed_data_parallel_step. Errors: as train_step.
Tensor data_parallel_step(ReplicatedModule& model, ReplicatedOptimizer& optimizer, const Tensor& features,
                          const Tensor& targets, const LossFunction& loss = nn::mse_loss);
// The same step on a batch already cut over the devices: inputs[i] and labels[i] on model.devices()[i] (a prefix of
// the devices), `rows` rows in all: weighted_training_step (eager) and the sum of the losses on devices[0].
// Errors: as weighted_training_step.
Tensor placed_data_parallel_step(ReplicatedModule& model, ReplicatedOptimizer& optimizer,
                                 const std::vector<Tensor>& inputs, const std::vector<Tensor>& labels, int64_t rows,
                                 const LossFunction& loss = nn::mse_loss);

}  // namespace tandem::parallel
