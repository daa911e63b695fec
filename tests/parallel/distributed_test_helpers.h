#pragma once
// Training with DistributedDataParallel against the single-process reference, shared by the in-process tests
// (tests/parallel) and the multi-process ones (tests/distributed). Every process can compute the reference itself:
// ReplicatedModule over virtual CPU devices cpu:0 .. cpu:(world devices - 1) on the whole batch, where global
// device g of the job gets chunk g of each batch.

#include <memory>
#include <vector>

#include "parallel/parallel_test_helpers.h"
#include "tandem/comm/process_group.h"
#include "tandem/parallel/distributed.h"

namespace tandem::testing {

constexpr optim::SGDOptions kDistributedSgd{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3};
constexpr size_t kDistributedSteps = 20;

// Rows of step `step`: mostly several per device, some uneven, and some steps with fewer rows than devices (1, 3),
// in which the last devices, and whole processes, get no rows.
inline int64_t distributed_rows(size_t step) {
  static const std::vector<int64_t> rows = {16, 13, 1, 12, 8, 3, 24, 9, 16, 5};
  return rows[step % rows.size()];
}

struct DistributedBatch {
  Tensor x;
  Tensor y;
};

inline DistributedBatch distributed_batch(size_t step, uint64_t seed = 0) {
  return {seeded_randn({distributed_rows(step), 10}, Device::cpu(0), 500 + seed + step),
          seeded_randn({distributed_rows(step), 1}, Device::cpu(0), 700 + seed + step)};
}

// The same parameters on every device (initialized on the host, seeded).
inline std::shared_ptr<TwoLayerNet> distributed_net(Device device = Device::cpu(0)) {
  return make_net(device, 10, 20, 1);
}

inline std::vector<Device> virtual_devices(size_t count) {
  std::vector<Device> devices;
  for (size_t d = 0; d < count; ++d) devices.push_back(Device::cpu(static_cast<int>(d)));
  return devices;
}

// The chunks of `b` that global devices first .. first + count - 1 get when the batch is scattered over
// `world_devices` devices, each on the corresponding device of `on` (fewer, down to none, when the batch has fewer
// rows than devices). `scale` multiplies each chunk's loss weight, its share of the batch's rows.
struct Shard {
  std::vector<Tensor> x;
  std::vector<Tensor> y;
  std::vector<float> weight;
};

inline Shard shard_of(const DistributedBatch& b, size_t world_devices, size_t first, const std::vector<Device>& on,
                      float scale = 1.0f) {
  const std::vector<Tensor> xs = comm::scatter(b.x, virtual_devices(world_devices));
  const std::vector<Tensor> ys = comm::scatter(b.y, virtual_devices(world_devices));
  Shard shard;
  for (size_t i = 0; i < on.size() && first + i < xs.size(); ++i) {
    shard.x.push_back(xs[first + i].to(on[i]));
    shard.y.push_back(ys[first + i].to(on[i]));
    shard.weight.push_back(scale * static_cast<float>(xs[first + i].size(0)) / static_cast<float>(b.x.size(0)));
  }
  return shard;
}

inline std::function<Tensor(size_t, const Tensor&)> weighted_mse(const Shard& shard) {
  return [&shard](size_t i, const Tensor& output) { return nn::mse_loss(output, shard.y[i]) * shard.weight[i]; };
}

// The reference: ReplicatedModule over `world_devices` virtual devices, `steps` SGD steps with momentum, each step
// accumulating the gradients of `micro_batches` batches (seeds step, step + 100, ...) before the update.
inline std::shared_ptr<TwoLayerNet> train_reference(size_t world_devices, size_t steps = kDistributedSteps,
                                                    size_t micro_batches = 1) {
  auto net = distributed_net();
  parallel::ReplicatedModule model(net, virtual_devices(world_devices), {.bucket_size = 128});
  parallel::ReplicatedSGD sgd(model, kDistributedSgd);
  for (size_t step = 0; step < steps; ++step) {
    model.zero_grad();
    for (size_t micro = 0; micro < micro_batches; ++micro) {
      const Shard shard = shard_of(distributed_batch(step, 100 * micro), world_devices, 0, model.devices());
      model.forward_backward(shard.x, weighted_mse(shard));
    }
    sgd.step();
  }
  return net;
}

// How a DistributedDataParallel step runs the replicas.
enum class DdpPath {
  ForwardThenBackward,  // forward(), the caller's backward over the losses, reduce_gradients()
  ForwardBackward,      // forward_backward()
};

// One micro-batch of this process: its shard of the batch, forward and backward, reduced unless inside no_sync().
inline void ddp_micro_batch(parallel::DistributedDataParallel& ddp, const DistributedBatch& b, DdpPath path) {
  const comm::ProcessGroup& group = *ddp.group();
  const size_t local = group.devices().size();
  // Average divides the sum over the processes by their number: each loss counts size() times as much.
  const float scale = ddp.options().reduction == comm::ReduceOp::Average ? static_cast<float>(group.size()) : 1.0f;
  const Shard shard =
      shard_of(b, group.world_devices(), static_cast<size_t>(group.rank()) * local, group.devices(), scale);
  if (path == DdpPath::ForwardBackward) {
    ddp.forward_backward(shard.x, weighted_mse(shard));
    return;
  }
  const std::vector<Tensor> outputs = ddp.forward_replicas(shard.x);
  std::vector<Tensor> losses;
  for (size_t i = 0; i < outputs.size(); ++i) losses.push_back(weighted_mse(shard)(i, outputs[i]));
  if (!losses.empty()) autograd::backward(losses);
  ddp.reduce_gradients();
}

// The same training as train_reference with DistributedDataParallel over `group` (the model on its first device):
// each process feeds its shard; the micro-batches before the last of each step run inside no_sync().
inline std::shared_ptr<TwoLayerNet> train_distributed(const std::shared_ptr<comm::ProcessGroup>& group,
                                                      comm::ReduceOp reduction, DdpPath path,
                                                      size_t steps = kDistributedSteps, size_t micro_batches = 1) {
  auto net = distributed_net(group->devices()[0]);
  parallel::DistributedDataParallel ddp(net, group, {.bucket_size = 128, .reduction = reduction});
  parallel::ReplicatedSGD sgd(ddp.replicated(), kDistributedSgd);
  for (size_t step = 0; step < steps; ++step) {
    ddp.zero_grad();
    for (size_t micro = 0; micro + 1 < micro_batches; ++micro) {
      const auto no_sync = ddp.no_sync();
      ddp_micro_batch(ddp, distributed_batch(step, 100 * micro), path);
    }
    ddp_micro_batch(ddp, distributed_batch(step, 100 * (micro_batches - 1)), path);
    sgd.step();
  }
  return net;
}

}  // namespace tandem::testing
