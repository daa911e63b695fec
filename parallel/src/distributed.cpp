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
  collective.group = group;
  collective.keeps_sum_on_replica0 = reduction == comm::ReduceOp::Average || group->rank() == 0;
  return collective;
}

}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module,
                                                 std::shared_ptr<comm::ProcessGroup> group, DistributedOptions options)
    : group_(std::move(group)), options_(options) {
  TANDEM_CHECK(module != nullptr, kDistributedDataParallel, ": module is null");
  TANDEM_CHECK(group_ != nullptr, kDistributedDataParallel, ": group is null");
  detail::check_same_structure(*module, *group_, kDistributedDataParallel);
  replicated_ = std::make_unique<ReplicatedModule>(
      std::move(module), group_->devices(),
      ReplicatedOptions{.bucket_size = options_.bucket_size, .collective = collective_of(group_, options_.reduction)});
  sync_parameters();
}

DistributedDataParallel::~DistributedDataParallel() = default;

std::vector<Tensor> DistributedDataParallel::forward(const std::vector<Tensor>& inputs) {
  TANDEM_CHECK(!replicated_->step_open(), kDistributedDataParallel,
               "::forward: the step opened by the previous forward is still open; call reduce_gradients() after each "
               "backward");
  std::vector<Tensor> outputs;
  if (!inputs.empty()) outputs = replicated_->forward(inputs);
  // Note [A process without rows]: with no inputs this process runs nothing, but in grad mode it still opens the
  // step, and reduce_gradients() takes part in every bucket's collective with the gradients its buffers hold.
  if (GradMode::is_enabled()) replicated_->prepare_for_backward(inputs.size(), /*reduce=*/!no_sync_);
  return outputs;
}

std::vector<Tensor> DistributedDataParallel::forward_backward(
    const std::vector<Tensor>& inputs, const std::function<Tensor(size_t replica, const Tensor& output)>& loss,
    const std::vector<Tensor>& seeds) {
  if (!inputs.empty()) {
    return replicated_->forward_backward(inputs, loss, /*reduce=*/!no_sync_, ReplicaThreads::Workers, seeds);
  }
  replicated_->prepare_for_backward(0, /*reduce=*/!no_sync_);  // Note [A process without rows]
  if (!no_sync_) replicated_->reduce_gradients();
  return {};
}

void DistributedDataParallel::reduce_gradients() {
  if (replicated_->step_open() || !no_sync_) replicated_->reduce_gradients();
}

void DistributedDataParallel::zero_grad() { replicated_->zero_grad(); }

void DistributedDataParallel::sync_parameters() {
  NoGradGuard no_grad;
  const ReplicatedModule& local = *replicated_;
  const size_t count = local.module()->parameters().size();
  std::vector<std::vector<Tensor>> parameters;  // [replica][parameter]
  for (const std::shared_ptr<nn::Module>& replica : local.replicas()) parameters.push_back(replica->parameters());
  for (size_t i = 0; i < count; ++i) {
    std::vector<Tensor> copies;  // one per local device: each becomes rank 0's master parameter
    for (const std::vector<Tensor>& replica : parameters) copies.push_back(replica[i]);
    group_->broadcast(copies, 0);
  }
}

DistributedDataParallel::NoSync::NoSync(DistributedDataParallel& ddp) : ddp_(ddp), previous_(ddp.no_sync_) {
  ddp_.no_sync_ = true;
}

DistributedDataParallel::NoSync::~NoSync() { ddp_.no_sync_ = previous_; }

}  // namespace tandem::parallel
