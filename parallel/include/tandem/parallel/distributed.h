#pragma once
// Multi-process data parallelism: DistributedDataParallel keeps one model per process (replicated over the process's
// devices, as ReplicatedModule) and makes every gradient the reduction over every device of every process of a
// comm::ProcessGroup, bucket by bucket while backward goes on, like PyTorch's DistributedDataParallel.
//
//   auto group = comm::ProcessGroup::from_environment(parse_devices("cuda:0"));   // one process per GPU
//   parallel::DistributedDataParallel ddp(net, group);          // rank 0's parameters reach every rank
//   parallel::ReplicatedSGD sgd(ddp.replicated(), {.lr = 0.1, .momentum = 0.9});
//   for (...) {
//     sgd.zero_grad();
//     std::vector<Tensor> out = ddp.forward({x_shard});           // this rank's rows, one input per local device
//     nn::mse_loss(out[0], y_shard).backward();                   // buckets are all-reduced as they become ready
//     ddp.reduce_gradients();                                      // joins them: every rank holds the average
//     sgd.step();
//   }
//
// A group of one process is ReplicatedModule exactly. With several processes every bucket's collective spans every
// device of every process, and the buckets are launched in one fixed order on every process (NCCL and MPI need the
// same order of collectives everywhere; Note [Fixed bucket order] in gradient_reducer.h). So every process calls
// forward / forward_backward and reduce_gradients the same number of times, in the same order and no_sync() state,
// also in a step in which it has no rows.
//
// On GPUs, parallel::CapturedStep over replicated() captures each process's whole step (its bucket all-reduces
// included) as one CUDA graph and replays it, the processes deciding together which steps replay (Note [Capturing
// across processes] in captured_step.h); CapturedStep::step_shard takes a process's share of a global batch.

#include <cstddef>
#include <functional>
#include <memory>
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
};

class DistributedDataParallel {
 public:
  // `module`'s parameters must be on group->devices()[0]. Collective: every process constructs its
  // DistributedDataParallel with a module of the same structure; rank 0's parameter values are broadcast to every
  // process (and replica) here. Errors: null module or group; those of ReplicatedModule; processes whose models
  // differ in parameter count or shapes (found through the group, naming the first difference).
  DistributedDataParallel(std::shared_ptr<nn::Module> module, std::shared_ptr<comm::ProcessGroup> group,
                          DistributedOptions options = {});
  ~DistributedDataParallel();
  DistributedDataParallel(const DistributedDataParallel&) = delete;
  DistributedDataParallel& operator=(const DistributedDataParallel&) = delete;

  const std::shared_ptr<comm::ProcessGroup>& group() const { return group_; }
  const std::shared_ptr<nn::Module>& module() const { return replicated_->module(); }  // this process's master
  ReplicatedModule& replicated() { return *replicated_; }  // the local replicas (optimizers are built over it)
  const ReplicatedModule& replicated() const { return *replicated_; }
  const DistributedOptions& options() const { return options_; }

  // Runs the local replicas on inputs[i] (on group->devices()[i]); fewer inputs than local devices (down to none:
  // this process has no rows this step) runs the first inputs.size() replicas, and the others take part in the
  // reduction with zero gradients. In grad mode, and outside no_sync(), it opens a step: the backward that follows
  // reduces each bucket as soon as it is ready, and reduce_gradients() closes the step.
  // Errors: as ReplicatedModule::forward (except that no inputs is allowed); a step still open from the previous
  // forward (call reduce_gradients() after each backward).
  std::vector<Tensor> forward(const std::vector<Tensor>& inputs);
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
  void zero_grad();  // zeroes the local gradient buffers
  // Broadcasts rank 0's master parameters to every process and replica (after loading a checkpoint on rank 0).
  void sync_parameters();

  // While the returned guard lives, forward/forward_backward accumulate gradients locally without any collective
  // (gradient accumulation, PyTorch's no_sync()); the first step after it reduces everything accumulated.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  NoSync no_sync() { return NoSync(*this); }
  bool syncing() const { return !no_sync_; }

 private:
  std::shared_ptr<comm::ProcessGroup> group_;
  DistributedOptions options_;
  std::unique_ptr<ReplicatedModule> replicated_;
  bool no_sync_ = false;
};

}  // namespace tandem::parallel
