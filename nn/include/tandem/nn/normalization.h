#pragma once
// Normalization layers: LayerNorm (over the trailing dimensions of each sample), BatchNorm1d and BatchNorm2d (over
// the batch, with running statistics kept as buffers). All are written in tandem's ops, so they run on the input's
// device and are differentiated by autograd.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "tandem/core/shape.h"
#include "tandem/nn/module.h"

namespace tandem::nn {

// y = (x - mean) / sqrt(var + eps) * weight + bias, with mean and the population variance taken over the last
// normalized_shape.size() dimensions, which must equal normalized_shape; weight (ones) and bias (zeros) have
// normalized_shape, as torch.nn.LayerNorm; with elementwise_affine but not bias, there is a weight and no bias
// (PyTorch's bias=False).
class LayerNorm : public Cloneable<LayerNorm> {
 public:
  // Errors: an empty normalized_shape or a size < 1; eps negative or NaN.
  explicit LayerNorm(Shape normalized_shape, double eps = 1e-5, bool elementwise_affine = true, bool bias = true,
                     Device device = Device::cpu());

  // input: [..., normalized_shape] -> the same shape. Errors: any other shape (naming the layer).
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;

  const Shape& normalized_shape() const { return normalized_shape_; }

  Tensor weight;  // undefined (and not a parameter) without elementwise_affine
  Tensor bias;    // undefined (and not a parameter) without elementwise_affine or without bias

 private:
  Shape normalized_shape_;
  double eps_;
};

// Note [Batch normalization]: BatchNorm1d and BatchNorm2d (as torch.nn's, over BatchNormBase) normalize each channel
// C of [N, C, ...] inputs:
//   training (or without running statistics): y = (x - mean_B) / sqrt(var_B + eps) * weight + bias, with the batch's
//     mean and population variance over every dimension but C (N, and L or H and W);
//   eval with running statistics: the same with running_mean and running_var.
// Each training forward with track_running_stats updates, as PyTorch does,
//   num_batches_tracked += 1
//   running_mean = (1 - f) * running_mean + f * mean_B
//   running_var  = (1 - f) * running_var  + f * var_B * n / (n - 1)     (the unbiased variance, n = numel / C)
// with f = momentum, or f = 1 / num_batches_tracked (a cumulative average) when momentum is nullopt. The update runs
// on the device, under no grad; num_batches_tracked (int64) is counted in float32 there, exact up to 2^24 batches.
//
// Buffers under data parallelism, as PyTorch's DataParallel: the master's buffers (replica 0's) are the ones that
// count. parallel::replicate gives the replica on the master's device the master's own buffer tensors and the others
// copies, and parallel::ReplicatedModule copies the master's buffers onto the other replicas before each forward; so
// running statistics are those of replica 0's share of each batch, and the other replicas' updates are overwritten.
// Between processes, as PyTorch's DistributedDataParallel, parallel::DistributedDataParallel broadcasts rank 0's
// master buffers before each forward (DistributedOptions::broadcast_buffers, default true): rank 0's count. Each
// replica normalizes by the statistics of its own share of the batch, as in PyTorch, unless the layer synchronizes
// its statistics (below).
//
// Note [Synchronized batch statistics]: with a BatchStatisticsSync set (parallel::convert_sync_batchnorm sets one
// that reduces over every process of a comm::ProcessGroup, PyTorch's SyncBatchNorm), a training forward takes its
// statistics over the whole batch of every replica of the step, in two passes that each reduce one [C + 1] or [C]
// tensor:
//   [sum x, count] over every replica -> mean = sum x / n;   sum (x - mean)^2 over every replica -> var (/ n)
// The reductions are differentiable (the gradient of each replica's local sums is the reduction of every replica's
// gradients of the global ones), so backward reduces the per-channel gradient sums the same way, and outputs and
// gradients are those of the layer on the concatenated batch on one device. The running statistics take the global
// mean and unbiased variance (the global n). Eval, and a layer without running statistics in eval, are unchanged.
//
// How a batch norm reduces its per-channel sums over every replica of a training step (Note [Synchronized batch
// statistics]); parallel implements it over a comm::ProcessGroup.
class BatchStatisticsSync {
 public:
  virtual ~BatchStatisticsSync() = default;
  // The sum of `local` (a [k] float32 tensor on the input's device) over every replica of the step, differentiable:
  // the gradient of each replica's `local` is the sum of every replica's gradient of the result. `layer` names the
  // caller in errors.
  virtual Tensor all_reduce_sum(const char* layer, const Tensor& local) = 0;
};

// What the two layers share: construction, parameters and buffers, the normalization, the running-statistics update
// and extra_repr. Self (BatchNorm1d or BatchNorm2d) checks the input's shape and names itself in errors.
template <class Self>
class BatchNormBase : public Cloneable<Self> {
 public:
  std::string extra_repr() const override;

  int64_t num_features() const { return num_features_; }
  // Training statistics over every replica of the step through `sync` (null: this replica's batch alone, the
  // default); copies (clone(), replicas) share it. Note [Synchronized batch statistics].
  void set_statistics_sync(std::shared_ptr<BatchStatisticsSync> sync) { sync_ = std::move(sync); }
  const std::shared_ptr<BatchStatisticsSync>& statistics_sync() const { return sync_; }

  Tensor weight;  // undefined (and not parameters) without affine
  Tensor bias;
  Tensor running_mean;  // undefined (and not buffers) without track_running_stats
  Tensor running_var;
  Tensor num_batches_tracked;

 protected:
  // weight ones, bias zeros ([C], parameters when affine); running_mean zeros, running_var ones ([C]) and
  // num_batches_tracked 0 (int64, []) as buffers when track_running_stats.
  // Errors (naming `layer`): num_features < 1; eps negative or NaN; momentum outside [0, 1].
  BatchNormBase(const char* layer, int64_t num_features, double eps, std::optional<double> momentum, bool affine,
                bool track_running_stats, Device device);

  // The normalization of an input of shape [N, num_features, ...] that Self has checked. Errors (naming `layer`):
  // a training batch with one value per channel (numel == num_features), whose variance is undefined.
  Tensor normalize(const char* layer, const Tensor& input);

 private:
  void update_running_stats(const Tensor& batch_mean, const Tensor& batch_var, int64_t count);

  int64_t num_features_;
  double eps_;
  std::optional<double> momentum_;
  std::shared_ptr<BatchStatisticsSync> sync_;
};

// Batch normalization of [N, C] or [N, C, L] inputs per channel C, as torch.nn.BatchNorm1d (Note [Batch
// normalization]).
class BatchNorm1d : public BatchNormBase<BatchNorm1d> {
 public:
  // Parameters, buffers and errors: BatchNormBase's constructor.
  explicit BatchNorm1d(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                       bool affine = true, bool track_running_stats = true, Device device = Device::cpu());

  // Errors: an input that is not [N, num_features] or [N, num_features, L]; a training batch with one value per
  // channel (N * L == 1), whose variance is undefined.
  Tensor forward(const Tensor& input) override;
};

// Batch normalization of [N, C, H, W] inputs per channel C, as torch.nn.BatchNorm2d (Note [Batch normalization]):
// the statistics are taken over N, H and W.
class BatchNorm2d : public BatchNormBase<BatchNorm2d> {
 public:
  // Parameters, buffers and errors: BatchNormBase's constructor.
  explicit BatchNorm2d(int64_t num_features, double eps = 1e-5, std::optional<double> momentum = 0.1,
                       bool affine = true, bool track_running_stats = true, Device device = Device::cpu());

  // Errors: an input that is not [N, num_features, H, W]; a training batch with one value per channel
  // (N * H * W == 1), whose variance is undefined.
  Tensor forward(const Tensor& input) override;
};

// Defined in batch_norm.cpp.
extern template class BatchNormBase<BatchNorm1d>;
extern template class BatchNormBase<BatchNorm2d>;

}  // namespace tandem::nn
