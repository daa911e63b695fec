#include "tandem/trainers/train_step.h"

#include <numeric>
#include <utility>

#include "tandem/comm/comm.h"
#include "tandem/core/error.h"
#include "tandem/parallel/weighted_step.h"

namespace tandem::trainers {
namespace {

void check_sums(const parallel::DistributedDataParallel& model) {
  TANDEM_CHECK(model.options().reduction == comm::ReduceOp::Sum, "train_step: the DistributedDataParallel ",
               "averages its gradients but expected ReduceOp::Sum (the losses carry each chunk's share of the global ",
               "batch)");
}

// A process's share of a global batch: `sizes` (device_rows) for at most `devices` devices, each >= 1, adding up to
// the `rows` it holds, of a global batch of `global_rows` >= rows.
void check_shard(const std::vector<int64_t>& sizes, int64_t rows, int64_t global_rows, size_t devices) {
  TANDEM_CHECK(sizes.size() <= devices, "train_step: the batch has rows for ", sizes.size(),
               " devices but the model has ", devices);
  for (int64_t size : sizes) TANDEM_CHECK(size >= 1, "train_step: device_rows holds ", size, " but expected >= 1");
  const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  TANDEM_CHECK(total == rows, "train_step: device_rows add up to ", total, " but the batch has ", rows, " rows");
  TANDEM_CHECK(global_rows >= rows && global_rows >= 1, "train_step: global_rows is ", global_rows,
               " but this process alone has ", rows, " rows");
}

// The features and the targets of every part of a batch already on the devices, checked to be on devices[i] with
// batch.device_rows[i] rows (after check_shard).
std::pair<std::vector<Tensor>, std::vector<Tensor>> placed_parts(const TensorBatch& batch,
                                                                 const std::vector<Device>& devices) {
  TANDEM_CHECK(batch.parts.size() == batch.device_rows.size(), "train_step: the batch has ", batch.parts.size(),
               " parts but ", batch.device_rows.size(), " device_rows entries");
  std::vector<Tensor> inputs, labels;
  for (size_t i = 0; i < batch.parts.size(); ++i) {
    const std::vector<Tensor>& part = batch.parts[i];
    TANDEM_CHECK(part.size() == 2, "train_step: part ", i, " of the batch holds ", part.size(),
                 " tensors but expected two (features and targets)");
    parallel::check_batch_rows(part[0], part[1], "train_step");
    TANDEM_CHECK(part[0].device() == devices[i] && part[1].device() == devices[i], "train_step: part ", i,
                 " of the batch is on ", part[0].device(), " and ", part[1].device(), " but expected the model's ",
                 "device ", devices[i]);
    TANDEM_CHECK(part[0].size(0) == batch.device_rows[i], "train_step: part ", i, " of the batch has ", part[0].size(0),
                 " rows but device_rows says ", batch.device_rows[i]);
    inputs.push_back(part[0]);
    labels.push_back(part[1]);
  }
  return {std::move(inputs), std::move(labels)};
}

}  // namespace

Tensor train_step(parallel::ReplicatedModule& model, parallel::ReplicatedOptimizer& optimizer, const Tensor& features,
                  const Tensor& targets, const LossFunction& loss) {
  return parallel::data_parallel_step(model, optimizer, features, targets, loss);
}

Tensor train_step(parallel::DistributedDataParallel& model, parallel::ReplicatedOptimizer& optimizer,
                  const Batch& batch, const LossFunction& loss) {
  check_sums(model);
  parallel::check_batch_rows(batch.features, batch.targets, "train_step");
  const std::vector<Device>& all_devices = model.group()->devices();
  const std::vector<int64_t>& sizes = batch.device_rows;
  check_shard(sizes, batch.features.size(0), batch.global_rows, all_devices.size());
  const std::vector<Device> devices(all_devices.begin(),
                                    all_devices.begin() + static_cast<std::ptrdiff_t>(sizes.size()));
  std::vector<Tensor> inputs, labels;
  if (!sizes.empty()) {
    inputs = comm::scatter(batch.features, devices, sizes);
    labels = comm::scatter(batch.targets, devices, sizes);
  }
  const std::vector<Tensor> losses =
      parallel::weighted_forward_backward(model, inputs, labels, batch.global_rows, loss);
  optimizer.step();
  return parallel::sum_losses(losses, all_devices.front());
}

Tensor train_step(parallel::ReplicatedModule& model, parallel::ReplicatedOptimizer& optimizer, const TensorBatch& batch,
                  const LossFunction& loss) {
  const int64_t rows = batch.rows();
  TANDEM_CHECK(rows >= 1 && batch.global_rows == rows, "train_step: global_rows is ", batch.global_rows,
               " and the batch has ", rows, " rows but expected the same number, at least one (one process)");
  check_shard(batch.device_rows, rows, rows, model.devices().size());
  const auto [inputs, labels] = placed_parts(batch, model.devices());
  return parallel::placed_data_parallel_step(model, optimizer, inputs, labels, rows, loss);
}

Tensor train_step(parallel::DistributedDataParallel& model, parallel::ReplicatedOptimizer& optimizer,
                  const TensorBatch& batch, const LossFunction& loss) {
  check_sums(model);
  const std::vector<Device>& devices = model.group()->devices();
  check_shard(batch.device_rows, batch.rows(), batch.global_rows, devices.size());
  const auto [inputs, labels] = placed_parts(batch, devices);
  const std::vector<Tensor> losses =
      parallel::weighted_forward_backward(model, inputs, labels, batch.global_rows, loss);
  optimizer.step();
  return parallel::sum_losses(losses, devices.front());
}

}  // namespace tandem::trainers
