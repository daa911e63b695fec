#include "tandem/parallel/distributed.h"

#include "same_structure.h"
#include "tandem/core/error.h"
#include "tandem/core/grad_mode.h"

namespace tandem::parallel {

namespace {

constexpr const char* kDistributedDataParallel = "parallel::DistributedDataParallel";

// Each bucket reduced by the group, over every replica of every process (Note [Fixed bucket order] in
// gradient_reducer.h, Note [Accumulating onto sums] in gradient_reducer.cpp).
// A group of one process is ReplicatedModule exactly: comm's in-process sum (an average over one process is the sum).
GradientCollective collective_of(const std::shared_ptr<comm::ProcessGroup>& group, comm::ReduceOp reduction) {
  if (group->size() == 1) return {};
  GradientCollective collective;
  collective.start = [group, reduction](std::vector<Tensor>& slices, const std::vector<StreamMarker>& ready) {
    return group->all_reduce_async(slices, ready, reduction);
  };
  collective.run = [group, reduction](std::vector<Tensor>& slices) { group->all_reduce(slices, reduction); };
  collective.spans_processes = true;
  collective.keeps_sum_on_replica0 = reduction == comm::ReduceOp::Average || group->rank() == 0;
  return collective;
}

// Tensor by tensor, rank 0's master tensors (tensors_of(master)) onto the same tensors of every replica of every
// process: one broadcast per tensor, over one copy per local device.
void broadcast_from_rank0(comm::ProcessGroup& group, const std::vector<std::shared_ptr<nn::Module>>& replicas,
                          const std::function<std::vector<Tensor>(const nn::Module&)>& tensors_of) {
  NoGradGuard no_grad;
  std::vector<std::vector<Tensor>> tensors;  // [replica][tensor]
  for (const std::shared_ptr<nn::Module>& replica : replicas) tensors.push_back(tensors_of(*replica));
  for (size_t i = 0; i < tensors.front().size(); ++i) {
    std::vector<Tensor> copies;
    for (const std::vector<Tensor>& replica : tensors) copies.push_back(replica[i]);
    if (copies.front().dtype() == DType::Float32) {
      group.broadcast(copies, 0);
      continue;
    }
    // The group carries float32: another dtype (BatchNorm's int64 num_batches_tracked, exact up to 2^24) travels
    // as float32 copies, written back into the tensors.
    std::vector<Tensor> floats;
    for (const Tensor& copy : copies) floats.push_back(copy.to(DType::Float32));
    group.broadcast(floats, 0);
    for (size_t d = 0; d < copies.size(); ++d) copies[d].copy_(floats[d]);
  }
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 std::shared_ptr<comm::ProcessGroup> group, DistributedOptions options)
    : group_(std::move(group)), options_(options) {
  TANDEM_CHECK(module != nullptr, kDistributedDataParallel, ": module is null");
  TANDEM_CHECK(group_ != nullptr, kDistributedDataParallel, ": group is null");
  detail::check_same_structure(*module, *group_, kDistributedDataParallel);
  module_ = module;
  replicated_ = std::make_unique<ReplicatedModule>(
      std::move(module), group_->devices(),
      ReplicatedOptions{.bucket_size = options_.bucket_size, .collective = collective_of(group_, options_.reduction)});
  replicated_->set_find_unused_parameters(options_.find_unused_parameters);
  register_module("module", module_);
  sync_parameters();
}

DistributedDataParallel::~DistributedDataParallel() = default;

Tensor DistributedDataParallel::forward(const Tensor& input) {
  return nn::detail::single_output(*this, forward_all({input}), "parallel::DistributedDataParallel::forward");
}

std::vector<Tensor> DistributedDataParallel::forward_all(const std::vector<Tensor>& inputs) {
  broadcast_buffers();
  return replicated_->forward_all(inputs);
}

std::vector<Tensor> DistributedDataParallel::forward_replicas(const std::vector<Tensor>& inputs) {
  TANDEM_CHECK(!replicated_->step_open(), kDistributedDataParallel,
               "::forward_replicas: the step opened by the previous forward is still open; call reduce_gradients() "
               "after each backward");
  broadcast_buffers();
  std::vector<Tensor> outputs;
  if (!inputs.empty()) outputs = replicated_->forward_replicas(inputs);
  // Note [A process without rows]: with no inputs this process runs nothing, but in grad mode it still opens the
  // step, and reduce_gradients() takes part in every bucket's collective with the gradients its buffers hold.
  if (GradMode::is_enabled()) replicated_->prepare_for_backward(inputs.size(), /*reduce=*/syncing());
  return outputs;
}

std::vector<Tensor> DistributedDataParallel::forward_backward(
    const std::vector<Tensor>& inputs, const std::function<Tensor(size_t replica, const Tensor& output)>& loss,
    const std::vector<Tensor>& seeds) {
  broadcast_buffers();
  if (!inputs.empty()) {
    return replicated_->forward_backward(inputs, loss, /*reduce=*/syncing(), ReplicaThreads::Workers, seeds);
  }
  replicated_->prepare_for_backward(0, /*reduce=*/syncing());  // Note [A process without rows]
  if (syncing()) replicated_->reduce_gradients();
  return {};
}

void DistributedDataParallel::reduce_gradients() {
  if (replicated_->step_open() || syncing()) replicated_->reduce_gradients();
}

void DistributedDataParallel::zero_grad() { replicated_->zero_grad(); }

void DistributedDataParallel::broadcast_buffers() {
  if (options_.broadcast_buffers && group_->size() > 1 && !module_->buffers().empty()) sync_buffers();
}

void DistributedDataParallel::sync_parameters() {
  broadcast_from_rank0(*group_, replicated_->replicas(), [](const nn::Module& m) { return m.parameters(); });
}

void DistributedDataParallel::sync_buffers() {
  broadcast_from_rank0(*group_, replicated_->replicas(), [](const nn::Module& m) { return m.buffers(); });
}

}  // namespace tandem::parallel
