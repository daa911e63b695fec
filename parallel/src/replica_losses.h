#pragma once
// The replicas' losses in a training step (TrainingStep): each chunk's loss weighted by its share of the (global)
// batch, and their sum.
//
// Note [Weighting by the seed]: replica i's loss counts in the step as w_i * loss_i, w_i = rows_i / global_rows. Its
// gradients are those of loss_i scaled by w_i, and backward delivers exactly that when it starts from w_i in place of
// one: the product's backward would pass 1 * w_i, the same float, to loss_i's backward. So the product is never part
// of the autograd graph: its forward (a scale kernel) is taken on the detached loss only to return the weighted value,
// and not at all when w_i is 1 (one replica), and its backward and the seed's fill of ones are gone. Results are
// bitwise those of backward over w_i * loss_i.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "tandem/core/device.h"
#include "tandem/core/tensor.h"

namespace tandem::parallel::detail {

// Each chunk's share of the batch, rows_i / global_rows, as a float32 scalar on the chunk's device: the gradient that
// replica i's backward starts from.
std::vector<Tensor> loss_weights(const std::vector<Tensor>& labels, int64_t global_rows);

// The replicas' losses (detached), each weighted by its chunk's share, rows_i / global_rows: loss_i * w_i on
// loss_i's device, or loss_i itself where w_i is 1 (one replica).
std::vector<Tensor> weighted_losses(std::vector<Tensor> losses, const std::vector<Tensor>& labels, int64_t global_rows);

// The sum of the weighted losses as a scalar on `device` (zero for no losses: a process without rows).
Tensor sum_losses(const std::vector<Tensor>& losses, Device device);

// Throws unless replica i's loss is one element.
void check_loss_value(size_t replica, const Tensor& loss);

}  // namespace tandem::parallel::detail
