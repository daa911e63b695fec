#include "tandem/trainers/train_step.h"

#include <numeric>

#include "tandem/comm/comm.h"
#include "tandem/core/error.h"
#include "tandem/parallel/weighted_step.h"

namespace tandem::trainers {

Tensor train_step(parallel::ReplicatedModule& model, parallel::ReplicatedOptimizer& optimizer, const Tensor& features,
                  const Tensor& targets, const LossFunction& loss) {
  return parallel::data_parallel_step(model, optimizer, features, targets, loss);
}

Tensor train_step(parallel::DistributedDataParallel& model, parallel::ReplicatedOptimizer& optimizer,
                  const Batch& batch, const LossFunction& loss) {
  TANDEM_CHECK(model.options().reduction == comm::ReduceOp::Sum, "train_step: the DistributedDataParallel ",
               "averages its gradients but expected ReduceOp::Sum (the losses carry each chunk's share of the global ",
               "batch)");
  parallel::check_batch_rows(batch.features, batch.targets, "train_step");
  const std::vector<Device>& all_devices = model.group()->devices();
  const std::vector<int64_t>& sizes = batch.device_rows;
  const int64_t rows = batch.features.size(0);
  TANDEM_CHECK(sizes.size() <= all_devices.size(), "train_step: the batch has rows for ", sizes.size(),
               " devices but the group's processes drive ", all_devices.size());
  for (int64_t size : sizes) TANDEM_CHECK(size >= 1, "train_step: device_rows holds ", size, " but expected >= 1");
  const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
  TANDEM_CHECK(total == rows, "train_step: device_rows add up to ", total, " but the batch has ", rows, " rows");
  TANDEM_CHECK(batch.global_rows >= rows && batch.global_rows >= 1, "train_step: global_rows is ", batch.global_rows,
               " but this process alone has ", rows, " rows");
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

}  // namespace tandem::trainers
