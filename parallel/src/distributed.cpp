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

// Note [Reduce-scattered buckets]: under zero_stage >= 1 the group reduce-scatters each bucket, padded to a multiple
// of the world's W devices (Note [Padded buckets] in gradient_layout.h): global device g = rank * local devices + d
// owns chunk g of every bucket (the chunk ProcessGroup::reduce_scatter gives it), and the reduction lands in that
// chunk of its own slice, the rest of the slice keeping its local gradients. The reduction is stage 0's: a Sum over
// every device, or an Average that divides by the processes, not the devices (as collective_of's all-reduce, and in
// one process the sum over its devices), so an owned chunk holds what stage 0 leaves there. The start form runs the
// group's synchronous reduce-scatter at once: it is ordered after the work issued on the devices, so after the
// bucket's ready markers (on CPU devices it completes there, as the group's all-reduce does), and its work has
// nothing left to join. The buckets go in the fixed order of Note [Fixed bucket order] (spans_processes), even in
// one process: the group's collective is not comm's, which has no reduce-scatter. Under zero_stage 2 the slices are
// the buckets' staging tensors (Note [Staged gradient buckets] in gradient_reducer.h), which only their owned chunks
// outlive: they are reduced in place (ProcessGroup::reduce_scatter_in_place), the rest of each left unspecified.
GradientCollective scattering_collective_of(const std::shared_ptr<comm::ProcessGroup>& group, comm::ReduceOp reduction,
                                            int zero_stage) {
  const size_t first_device = static_cast<size_t>(group->rank()) * group->devices().size();
  GradientCollective collective;
  collective.run = [group, reduction, first_device, staged = zero_stage == 2](std::vector<Tensor>& slices) {
    if (staged) {
      group->reduce_scatter_in_place(slices, reduction);  // the staging tensors are dropped afterwards
      return;
    }
    const std::vector<Tensor> chunks = group->reduce_scatter(slices, reduction);
    NoGradGuard no_grad;
    for (size_t d = 0; d < slices.size(); ++d) {
      const int64_t rows = chunks[d].size(0);
      slices[d].narrow(0, static_cast<int64_t>(first_device + d) * rows, rows).copy_(chunks[d]);
    }
  };
  collective.start = [run = collective.run](std::vector<Tensor>& slices, const std::vector<StreamMarker>&) {
    run(slices);
    return comm::AllReduceWork();
  };
  collective.spans_processes = true;
  collective.scatter_devices = group->world_devices();
  collective.scatter_first_device = first_device;
  collective.shards_gradients = zero_stage == 2;
  return collective;
}

GradientCollective collective_for(const std::shared_ptr<comm::ProcessGroup>& group, const DistributedOptions& options) {
  TANDEM_CHECK(options.zero_stage >= 0 && options.zero_stage <= 2, kDistributedDataParallel,
               ": DistributedOptions::zero_stage is ", options.zero_stage, " but expected 0, 1 or 2");
  if (options.zero_stage == 0) return collective_of(group, options.reduction);
  return scattering_collective_of(group, options.reduction, options.zero_stage);
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
  GradientCollective collective = collective_for(group_, options_);
  detail::check_same_structure(*module, *group_, kDistributedDataParallel);
  module_ = module;
  replicated_ = std::make_unique<ReplicatedModule>(
      std::move(module), group_->devices(),
      ReplicatedOptions{.bucket_size = options_.bucket_size, .collective = std::move(collective)});
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
