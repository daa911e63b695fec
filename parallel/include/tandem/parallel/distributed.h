#pragma once
// Multi-process data parallelism: DistributedDataParallel keeps one model per process (replicated over the process's
// devices, as ReplicatedModule) and makes every gradient the reduction over every device of every process of a
// comm::ProcessGroup, bucket by bucket while backward goes on, like PyTorch's DistributedDataParallel. It is an
// nn::Module, used as PyTorch's is:
//
//   auto group = comm::ProcessGroup::from_environment(parse_devices("cuda:0"));   // one process per GPU
//   auto ddp = std::make_shared<parallel::DistributedDataParallel>(net, group);   // rank 0's parameters everywhere
//   optim::AdamW adamw(ddp->parameters(), {.lr = 1e-3});                          // a plain optimizer
//   for (...) {
//     adamw.zero_grad();
//     Tensor out = (*ddp)(x_shard);          // this rank's rows (scattered over its devices when it has several)
//     nn::mse_loss(out, y_shard).backward(); // buckets reduced as they become ready; when backward returns, every
//     adamw.step();                          // rank's gradients hold the average (Note [Closing the step at the end
//   }                                        // of backward] in replicated.h)
//
// An optimizer step on gradients that a synced backward did not reduce (after a backward inside no_sync(), or one
// that threw) is an Error naming the cause (Note [Unreduced gradients are refused] in replicated.h). The gradients
// are views into the flat bucket buffers (PyTorch's gradient_as_bucket_view = true, always): no copy into buckets,
// none back.
//
// A group of one process is ReplicatedModule exactly. With several processes every bucket's collective spans every
// device of every process, and the buckets are launched in one fixed order on every process (NCCL and MPI need the
// same order of collectives everywhere; Note [Fixed bucket order] in gradient_reducer.h). So every process calls
// forward (and backward) the same number of times, in the same no_sync() state, also in a step in which it has no
// rows (the per-device form below takes no inputs then).
//
// The per-device form is the fast path of parallel's training steps: forward_replicas / forward_backward with one
// input per local device and replicated optimizers; parallel::TrainingStep over it captures each process's
// whole step (its bucket all-reduces included) as one CUDA graph and replays it, the processes deciding together
// which steps replay (Note [Capturing across processes] in training_step.h).

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tandem/comm/process_group.h"
#include "tandem/core/tensor.h"
#include "tandem/nn/module.h"
#include "tandem/parallel/replicated.h"

namespace tandem::parallel {

struct DistributedOptions {
  size_t bucket_size = 25 * 1024 * 1024;  // bytes per gradient bucket; each bucket is one collective
  // How the processes' gradients combine. Average (PyTorch's DDP): the sum over every device of every process
  // divided by the number of processes, the gradient of the mean of the processes' (equally sized) batch losses.
  // Sum: for losses already weighted by each process's share of the global batch (uneven last batches).
  comm::ReduceOp reduction = comm::ReduceOp::Average;
  // Before each forward, rank 0's master buffers (BatchNorm's running statistics) are broadcast to every process and
  // replica, as PyTorch's DDP does; false: each process's master keeps its own.
  bool broadcast_buffers = true;
  // A parameter that gets no gradient in a backward of the module form: true takes part in the reduction with zeros
  // (the step neither hangs nor fails); false (PyTorch's default) makes that backward an Error naming the
  // parameters, after the reduction (so no rank is left waiting in it).
  bool find_unused_parameters = false;
  // ZeRO (Note [Sharded optimizer state] in sharded_optimizer.h): 0 replicates the optimizer state on every device;
  // 1 reduce-scatters each gradient bucket over every device of every process, so that each device's part of a
  // parallel::ShardedOptimizer updates only its shard of the parameters (with its shard of the state), and
  // all-gathers the updated parameters; a plain optimizer over the parameters is then refused. 2: as 1, and each
  // device also keeps only its shard of the reduced gradients (Note [Staged gradient buckets] in
  // gradient_reducer.h): the parameters' .grad stays undefined, and each bucket's gradients live in a staging tensor
  // from its first gradient to its reduce-scatter.
  int zero_stage = 0;
};

class DistributedDataParallel : public nn::Module {
 public:
  // `module`'s parameters must be on group->devices()[0]. Collective: every process constructs its
  // DistributedDataParallel with a module of the same structure; rank 0's parameter values are broadcast to every
  // process (and replica) here. Errors: null module or group; those of ReplicatedModule; processes whose models
  // differ in parameter count or shapes (found through the group, naming the first difference); a zero_stage other
  // than 0, 1 or 2.
  DistributedDataParallel(std::shared_ptr<nn::Module> module, std::shared_ptr<comm::ProcessGroup> group,
                          DistributedOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  std::string name() const override { return "DistributedDataParallel"; }
  const std::shared_ptr<comm::ProcessGroup>& group() const { return group_; }
  const std::shared_ptr<nn::Module>& module() const { return replicated_->module(); }  // this process's master
  ReplicatedModule& replicated() { return *replicated_; }  // the local replicas (optimizers are built over it)
  const ReplicatedModule& replicated() const { return *replicated_; }
  const DistributedOptions& options() const { return options_; }

  // ---- the module form ----
  // ReplicatedModule::forward_all over this process's devices (input scattered, output gathered on
  // group->devices()[0]), after the buffers' broadcast; the backward that follows closes the reduction over every
  // process. Errors: as there.
  Tensor forward(const Tensor& input) override;
  std::vector<Tensor> forward_all(const std::vector<Tensor>& inputs) override;

  // ---- the per-device form ----
  // Runs the local replicas on inputs[i] (on group->devices()[i]); fewer inputs than local devices (down to none:
  // this process has no rows this step) runs the first inputs.size() replicas, and the others take part in the
  // reduction with zero gradients. In grad mode, and outside no_sync(), it opens a step: the backward that follows
  // reduces each bucket as soon as it is ready, and reduce_gradients() closes the step.
  // Errors: as ReplicatedModule::forward_replicas (except that no inputs is allowed); a step still open from the
  // previous forward (call reduce_gradients() after each backward).
  std::vector<Tensor> forward_replicas(const std::vector<Tensor>& inputs);
  // Forward, loss and backward of every local replica at once, with the reduction over the processes, as
  // ReplicatedModule::forward_backward. Outside no_sync() every replica's gradients hold the reduction afterwards.
  // Fewer inputs than local devices, down to none, as forward(). Errors: as ReplicatedModule::forward_backward.
  // `seeds` as there.
  std::vector<Tensor> forward_backward(const std::vector<Tensor>& inputs,
                                       const std::function<Tensor(size_t replica, const Tensor& output)>& loss,
                                       const std::vector<Tensor>& seeds = {});
  // Closes the step opened by forward() (joining its collectives: no host synchronization) or, without one,
  // reduces every bucket now. Afterwards every replica of every process holds the reduced gradients. Inside
  // no_sync() it does nothing.
  void reduce_gradients();
  void zero_grad();  // zeroes the local gradient buffers (ReplicatedModule::zero_grad)
  // Broadcasts rank 0's master parameters to every process and replica (after loading a checkpoint on rank 0).
  void sync_parameters();
  // Broadcasts rank 0's master buffers to every process and replica (every forward does, with broadcast_buffers).
  void sync_buffers();
  // What every forward does first: sync_buffers() when options().broadcast_buffers, the group has several processes
  // and the module has buffers; nothing otherwise.
  void broadcast_buffers();

  // While the returned guard lives, every form of forward and backward accumulates gradients locally without any
  // collective (gradient accumulation, PyTorch's no_sync()); the first synced backward after it reduces everything
  // accumulated, and an optimizer step before that is refused.
  using NoSync = ReplicatedModule::NoSync;
  NoSync no_sync() { return replicated_->no_sync(); }
  bool syncing() const { return replicated_->syncing(); }

 private:
  std::shared_ptr<comm::ProcessGroup> group_;
  DistributedOptions options_;
  std::shared_ptr<nn::Module> module_;  // this process's master, registered as "module"
  std::unique_ptr<ReplicatedModule> replicated_;
};

}  // namespace tandem::parallel
