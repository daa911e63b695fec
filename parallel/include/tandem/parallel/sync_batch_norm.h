#pragma once
// Synchronized batch normalization, PyTorch's SyncBatchNorm: convert_sync_batchnorm makes every nn::BatchNorm1d and
// nn::BatchNorm2d of a model take its training statistics over the whole batch of every process of a
// comm::ProcessGroup (Note [Synchronized batch statistics] in tandem/nn/normalization.h), in place:
//
//   auto group = comm::ProcessGroup::from_environment({Device::cuda(local_rank)});  // one device per process
//   parallel::convert_sync_batchnorm(net, group);        // before DistributedDataParallel, with the DDP's group
//   auto ddp = std::make_shared<parallel::DistributedDataParallel>(net, group);
//
// The layers keep their type, parameters, buffers and names (a model's typed members stay valid); what changes is
// that each training forward reduces [sum x, n] and then sum (x - mean)^2 over the group, and each backward the two
// gradients of those sums, so that outputs, gradients and running statistics equal those of the layer on the
// processes' concatenated batch on one device. Eval mode is plain batch normalization.
//
// Supported: one device per process. Every process must run every training forward and backward of the model (as
// for DistributedDataParallel): a process with no rows of a batch passes an empty batch (the module form of
// DistributedDataParallel does); one that skips the forward (the per-device form given no inputs) leaves the others
// waiting in the all-reduce until the group's timeout, an Error. A captured TrainingStep cannot hold it (each forward
// reads the global count on the host). Several devices per process (a group with several local devices, or replicas of
// ReplicatedModule on other devices than the group's) are refused with an Error at the first training forward,
// never normalized by a partial batch.

#include <memory>
#include <utility>

#include "tandem/comm/process_group.h"
#include "tandem/nn/module.h"

namespace tandem::parallel {

// Sets on every BatchNorm1d and BatchNorm2d of `module` (itself included, recursively) a statistics sync over
// `group`, and returns `module`. Errors: null module or group; a group with more than one device per process.
std::shared_ptr<nn::Module> convert_sync_batchnorm(std::shared_ptr<nn::Module> module,
                                                   std::shared_ptr<comm::ProcessGroup> group);

// PyTorch's spelling, torch.nn.SyncBatchNorm.convert_sync_batchnorm(module, process_group): the same conversion.
class SyncBatchNorm {
 public:
  SyncBatchNorm() = delete;
  static std::shared_ptr<nn::Module> convert_sync_batchnorm(std::shared_ptr<nn::Module> module,
                                                            std::shared_ptr<comm::ProcessGroup> group) {
    return parallel::convert_sync_batchnorm(std::move(module), std::move(group));
  }
};

}  // namespace tandem::parallel
