#pragma once
// Sharded optimizers (ZeRO stages 1 and 2) for DistributedDataParallel with DistributedOptions::zero_stage = 1 or 2:
// every device of every process holds the optimizer state of its own shard of the parameters only, about 1/N of it
// over N devices, and is used as a plain optimizer is, PyTorch-style:
//
//   auto ddp = std::make_shared<parallel::DistributedDataParallel>(net, group, parallel::DistributedOptions{
//       .zero_stage = 1});
//   parallel::ShardedAdamW adamw(*ddp, {.lr = 1e-3, .weight_decay = 0.01});  // ShardedSGD, ShardedAdam likewise
//   for (...) {
//     adamw.zero_grad();
//     Tensor out = (*ddp)(x);               // every replica holds the parameters that the last step all-gathered
//     nn::mse_loss(out, y).backward();      // each bucket reduce-scattered as it becomes ready
//     adamw.step();                         // each device updates its shard, then every bucket is all-gathered
//   }
//
// Note [Sharded optimizer state]: the gradient buckets are padded to a multiple of the world's W devices (Note
// [Padded buckets] in gradient_layout.h) and reduce-scattered (Note [Reduce-scattered buckets] in
// parallel/src/distributed.cpp): global device g = rank * local devices + d owns chunk g of every bucket, and only
// that chunk of its gradient buffer holds the reduction. Its part of the sharded optimizer is an ordinary
// optim::Optimizer (built by the factory: optim::SGD, optim::Adam, optim::AdamW, so their update rules and kernels)
// over one 1-D shard per bucket, each of the chunk's length, whose .grad is the owned chunk of the gradient buffer
// (GradientReducer::owned_gradients; under stage 2 the buffer is the device's shard of the gradients, Note [Staged
// gradient buckets] in gradient_reducer.h).
// A step copies the replica's parameter elements that lie in each owned chunk into its shard (the padding stays
// zero: its gradient is zero, so SGD, Adam and AdamW keep it zero), steps, and all-gathers every bucket's shards
// over the group (one all_gather per bucket), writing each gathered bucket back into every parameter of the bucket
// on every device. A parameter may straddle chunks: each owner updates its part. The result equals stage 0's
// step for optimizers whose update is elementwise (every one of the repository's: Note [Stepping parameters apart]
// in tandem/optim/optimizer.h); an optimizer that needs a whole parameter or every gradient (a norm) does not fit.

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "tandem/core/tensor.h"
#include "tandem/optim/adam.h"
#include "tandem/optim/optimizer.h"
#include "tandem/optim/sgd.h"
#include "tandem/parallel/distributed.h"
#include "tandem/parallel/replayable_steps.h"
#include "tandem/parallel/replicated_optimizer.h"

namespace tandem::parallel {

// The bytes of the tensors of `optimizer`'s state_dict() (momentum buffers, Adam's moments), on all its devices.
size_t optimizer_state_bytes(const optim::Optimizer& optimizer);

class ShardedOptimizer : public ReplayableSteps {
 public:
  // Builds an optimizer over one local device's shards (1-D tensors, one per gradient bucket); its update must be
  // elementwise (Note [Sharded optimizer state]).
  using Factory = ReplicatedOptimizer::Factory;

  // Calls `make` once per local device. `model` must outlive the optimizer. Errors: a model whose
  // DistributedOptions::zero_stage is 0; an empty factory; a factory that returns null or an optimizer over other
  // tensors than the shards it was given.
  ShardedOptimizer(DistributedDataParallel& model, const Factory& make)
      : ShardedOptimizer(model, make, "parallel::ShardedOptimizer") {}
  virtual ~ShardedOptimizer() = default;
  ShardedOptimizer(const ShardedOptimizer&) = delete;
  ShardedOptimizer& operator=(const ShardedOptimizer&) = delete;

  // Every local device's shards stepped, then every bucket all-gathered onto every replica (collective: every
  // process steps together). Errors: gradients that a synced backward did not reduce (Note [Unreduced gradients are
  // refused] in replicated.h).
  void step() override;
  void zero_grad();  // model.zero_grad(): the gradients stay views of the flat buffers
  // step() split for a captured parallel::TrainingStep (Note [Replayed optimizer steps] in tandem/optim/optimizer.h):
  // replayable_step() is step() with every local device's optimizer's replayable_step(), the copies of the
  // parameters into the shards and the all-gathers captured with it; replayable(), state_generation(),
  // prepare_replay(), finish_replay(): ReplayableSteps's over the local devices' optimizers. Errors: as step().
  void replayable_step() override;
  // Note [Clipping over shards]: torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm) between backward and
  // step, over the shards: scales every owned chunk by min(max_norm / (norm + 1e-6), 1), where norm is the 2-norm of
  // all the reduced gradients together. Returns the norm: a scalar on the first local device, not read here (nothing
  // waits for a device). Collective: every process clips together. Errors: max_norm below 0 or NaN; gradients that a
  // synced backward did not reduce.
  Tensor clip_grad_norm(double max_norm);

  size_t size() const { return optimizers_.size(); }  // local devices
  DistributedDataParallel& model() const { return model_; }
  // Local device d's optimizer over its shards (its learning rates: set_lr). Errors: no such device.
  optim::Optimizer& optimizer(size_t replica) { return at(replica); }
  const optim::Optimizer& optimizer(size_t replica) const { return at(replica); }
  void set_lr(double lr);  // on every local device's optimizer
  // Local device d's shard of bucket b (the chunk its device owns). Errors: no such device or bucket.
  const Tensor& shard(size_t replica, size_t bucket) const;
  // The optimizer state held by local device d (optimizer_state_bytes of its optimizer). Errors: no such device.
  size_t optimizer_state_bytes(size_t replica) const { return parallel::optimizer_state_bytes(at(replica)); }

 protected:
  ShardedOptimizer(DistributedDataParallel& model, const Factory& make, const char* name);  // errors start with name
  const std::vector<std::unique_ptr<optim::Optimizer>>& local_optimizers() const override { return optimizers_; }

 private:
  // Elements of one parameter inside a device's shard: the shard's and the (flattened) parameter's views of them.
  struct Piece {
    Tensor shard;
    Tensor parameter;
  };
  // A parameter's place in its bucket, for writing the gathered bucket back.
  struct Placed {
    size_t parameter;
    int64_t offset;  // in the bucket
    int64_t numel;
  };

  optim::Optimizer& at(size_t replica) const;
  void update(StepForm form);  // step() (Eager) or replayable_step() (Replayable)
  void gather();

  const char* name_;
  DistributedDataParallel& model_;
  std::vector<std::vector<Tensor>> shards_;           // [replica][bucket]
  std::vector<std::vector<Piece>> pieces_;            // [replica]: the owned elements of every parameter
  std::vector<std::vector<Tensor>> flat_parameters_;  // [replica][parameter]: 1-D views (undefined: no place)
  std::vector<std::vector<Placed>> placed_;           // [bucket]
  std::vector<std::unique_ptr<optim::Optimizer>> optimizers_;
};

class ShardedSGD : public ShardedOptimizer {
 public:
  ShardedSGD(DistributedDataParallel& model, optim::SGDOptions options);
};

template <bool kDecoupledWeightDecay>
class ShardedAdamFamily : public ShardedOptimizer {
 public:
  using Options = optim::AdamFamilyOptions<kDecoupledWeightDecay>;
  ShardedAdamFamily(DistributedDataParallel& model, Options options)
      : ShardedOptimizer(
            model,
            [options](std::vector<Tensor> shards) {
              return std::make_unique<optim::AdamFamily<kDecoupledWeightDecay>>(std::move(shards), options);
            },
            kDecoupledWeightDecay ? "parallel::ShardedAdamW" : "parallel::ShardedAdam") {}
};
using ShardedAdam = ShardedAdamFamily<false>;
using ShardedAdamW = ShardedAdamFamily<true>;

}  // namespace tandem::parallel
