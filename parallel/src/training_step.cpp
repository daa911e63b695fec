#include "tandem/parallel/training_step.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "replica_losses.h"
#include "steps_in_backward.h"
#include "tandem/comm/comm.h"
#include "tandem/core/error.h"
#include "tandem/core/fused.h"
#include "tandem/core/grad_mode.h"
#include "tandem/core/warm_up.h"

namespace tandem::parallel {
namespace {

constexpr const char* kStep = "parallel::TrainingStep::step";

void check_same_rows(const Tensor& features, const Tensor& targets, const std::string& what) {
  TANDEM_CHECK(features.dim() >= 1 && targets.dim() >= 1 && features.size(0) == targets.size(0), kStep, ": ", what,
               "features of shape ", to_string(features.shape()), " and targets of shape ", to_string(targets.shape()),
               " but expected the same number of rows");
}

// The shape of the whole batch that `chunks` were cut from: chunk 0's with the rows of all; every chunk on its device
// (devices[i]) with chunk 0's dtype and trailing dimensions.
Shape whole_shape(const std::vector<Tensor>& chunks, const std::vector<Device>& devices, const char* what) {
  Shape shape = chunks.front().shape();
  shape[0] = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const Tensor& chunk = chunks[i];
    TANDEM_CHECK(chunk.device() == devices[i], kStep, ": ", what, " chunk ", i, " is on ", chunk.device(),
                 " but expected the model's device ", devices[i]);
    Shape rest = chunk.shape();
    rest[0] = 0;
    TANDEM_CHECK(chunk.dtype() == chunks.front().dtype() && rest == shape, kStep, ": ", what, " chunk ", i,
                 " has shape ", to_string(chunk.shape()), " and dtype ", chunk.dtype(), " but chunk 0 has ",
                 to_string(chunks.front().shape()), " and ", chunks.front().dtype(),
                 "; expected the same beyond the rows");
  }
  for (const Tensor& chunk : chunks) shape[0] += chunk.size(0);
  return shape;
}

// torch.chunk's cut of `rows` rows over `devices` devices (comm::scatter's without chunk sizes): chunks of
// ceil(rows / devices) rows, the last one shorter, and fewer chunks than devices where the rows run out.
std::vector<int64_t> torch_chunk_rows(int64_t rows, size_t devices) {
  std::vector<int64_t> cut;
  const int64_t size = (rows + static_cast<int64_t>(devices) - 1) / static_cast<int64_t>(devices);
  for (int64_t start = 0; start < rows; start += size) cut.push_back(std::min(size, rows - start));
  return cut;
}

}  // namespace

TrainingStep::TrainingStep(ReplicatedModule& model, ReplicatedOptimizer& optimizer, LossFunction loss,
                           TrainingStepOptions options)
    : TrainingStep(model, nullptr, &optimizer, nullptr, std::move(loss), options) {}

TrainingStep::TrainingStep(DistributedDataParallel& model, ReplicatedOptimizer& optimizer, LossFunction loss,
                           TrainingStepOptions options)
    : TrainingStep(model.replicated(), &model, &optimizer, nullptr, std::move(loss), options) {
  TANDEM_CHECK(model.options().zero_stage == 0, "parallel::TrainingStep: the DistributedDataParallel has ",
               "DistributedOptions::zero_stage ", model.options().zero_stage, ", which shards the optimizer state, ",
               "but the optimizer is replicated; step with a parallel::ShardedOptimizer (ShardedSGD, ShardedAdam, ",
               "ShardedAdamW)");
  check_sums(model);
}

TrainingStep::TrainingStep(DistributedDataParallel& model, ShardedOptimizer& optimizer, LossFunction loss,
                           TrainingStepOptions options)
    : TrainingStep(model.replicated(), &model, nullptr, &optimizer, std::move(loss), options) {
  TANDEM_CHECK(&optimizer.model() == &model, "parallel::TrainingStep: the sharded optimizer was built over another ",
               "DistributedDataParallel than the model it steps");
  check_sums(model);
}

// Note [Summed, not averaged]: each chunk's loss carries its share of the global batch.
void TrainingStep::check_sums(const DistributedDataParallel& model) {
  TANDEM_CHECK(model.options().reduction == comm::ReduceOp::Sum, "parallel::TrainingStep: the ",
               "DistributedDataParallel averages its gradients but expected ReduceOp::Sum (the losses carry each ",
               "chunk's share of the global batch)");
}

TrainingStep::TrainingStep(ReplicatedModule& model, DistributedDataParallel* distributed,
                           ReplicatedOptimizer* optimizer, ShardedOptimizer* sharded, LossFunction loss,
                           TrainingStepOptions options)
    : model_(model),
      distributed_(distributed),
      optimizer_(optimizer),
      sharded_(sharded),
      replayed_(optimizer != nullptr ? static_cast<ReplayableSteps&>(*optimizer) : *sharded),
      loss_(std::move(loss)),
      options_(options),
      group_(distributed != nullptr ? distributed->group() : nullptr) {
  TANDEM_CHECK(loss_ != nullptr, "parallel::TrainingStep: the loss function is empty");
  TANDEM_CHECK(options_.warmup_steps >= 0, "parallel::TrainingStep: warmup_steps is ", options_.warmup_steps,
               " but expected >= 0");
  TANDEM_CHECK(!options_.max_grad_norm || *options_.max_grad_norm >= 0.0, "parallel::TrainingStep: max_grad_norm is ",
               options_.max_grad_norm.value_or(0.0), " but expected a number >= 0");
  TANDEM_CHECK(optimizer_ == nullptr || &optimizer_->model() == &model_, "parallel::TrainingStep: the optimizer was ",
               "built over another ReplicatedModule than the model it steps");
}

ReplicatedOptimizer& TrainingStep::optimizer() const {
  TANDEM_CHECK(optimizer_ != nullptr, "parallel::TrainingStep::optimizer: the step runs a parallel::",
               "ShardedOptimizer (sharded_optimizer())");
  return *optimizer_;
}

TrainingStep::~TrainingStep() = default;

Tensor TrainingStep::step(const TrainingBatch& batch) {
  const Batch checked_batch = checked(batch);
  if (distributed_ != nullptr) distributed_->broadcast_buffers();  // as its forward does
  if (!accumulated_) return run(checked_batch);
  Tensor loss = eager(checked_batch,
                      "gradient accumulation runs eagerly: this step adds to the gradients of accumulate() (Note "
                      "[Accumulating micro-batches] in training_step.h)");
  accumulated_ = false;
  return loss;
}

Tensor TrainingStep::accumulate(const TrainingBatch& batch) {
  const Batch checked_batch = checked(batch);
  if (distributed_ != nullptr) distributed_->broadcast_buffers();  // as its forward does
  Tensor loss = eager(checked_batch,
                      "gradient accumulation runs eagerly (Note [Accumulating micro-batches] in "
                      "training_step.h)",
                      /*accumulate=*/true);
  accumulated_ = true;
  return loss;
}

void TrainingStep::warm_up_devices() const {
  if (across_processes()) {
    tandem::warm_up(model_.devices());  // the group created its NCCL communicator when it was created
  } else {
    comm::warm_up(model_.devices());  // with the communicators of the replicas' gradient sums
  }
}

TrainingStep::Batch TrainingStep::checked(const TrainingBatch& batch) const {
  const bool whole = batch.features.defined() || batch.targets.defined();
  const bool placed = !batch.inputs.empty() || !batch.labels.empty();
  TANDEM_CHECK(!(whole && placed), kStep, ": the batch holds both features and targets and chunks (inputs, labels); ",
               "expected one of the two");
  TANDEM_CHECK(whole || placed || model_.spans_processes(), kStep, ": the batch holds neither features and targets ",
               "nor chunks, but a model that is not reduced across processes needs at least one row");
  TANDEM_CHECK(whole || batch.device_rows.empty(), kStep, ": device_rows are for a whole batch (features and ",
               "targets), but the batch holds chunks");
  Batch checked_batch = whole ? checked_whole(batch) : checked_placed(batch);
  checked_batch.given = &batch;
  const int64_t rows = checked_batch.rows;
  TANDEM_CHECK(batch.global_rows >= 0, kStep, ": global_rows is ", batch.global_rows, " but expected >= 0");
  TANDEM_CHECK(batch.global_rows != 0 || !model_.spans_processes(), kStep, ": global_rows is 0, but a model ",
               "reduced across processes needs the rows of the global batch");
  const int64_t global_rows = batch.global_rows == 0 ? rows : batch.global_rows;
  TANDEM_CHECK(global_rows >= std::max<int64_t>(rows, 1), kStep, ": global_rows is ", global_rows,
               " but this process alone has ", rows, " rows (expected at least those, and at least 1)");
  checked_batch.key.global_rows = global_rows;
  if (batch.loss_out.defined()) {
    const Tensor& out = batch.loss_out;
    const Device device = model_.devices().front();
    TANDEM_CHECK(out.numel() == 1 && out.dtype() == DType::Float32 && out.device() == device, kStep, ": loss_out is ",
                 "of shape ", to_string(out.shape()), " and dtype ", out.dtype(), " on ", out.device(),
                 " but expected one float32 element on ", device);
  }
  return checked_batch;
}

TrainingStep::Batch TrainingStep::checked_whole(const TrainingBatch& batch) const {
  TANDEM_CHECK(batch.features.defined() && batch.targets.defined(), kStep, ": the batch holds ",
               batch.features.defined() ? "features but no targets" : "targets but no features", "; expected both");
  check_same_rows(batch.features, batch.targets, "");
  Batch checked_batch;
  const int64_t rows = batch.features.size(0);
  checked_batch.rows = rows;
  const std::vector<int64_t>& sizes = batch.device_rows;
  if (sizes.empty()) {
    TANDEM_CHECK(rows >= 1 || model_.spans_processes(), kStep, ": the batch has no rows; expected at least one");
    checked_batch.key.chunk_rows = torch_chunk_rows(rows, model_.size());
  } else {
    TANDEM_CHECK(sizes.size() <= model_.size(), kStep, ": the batch has device_rows for ", sizes.size(),
                 " devices but the model has ", model_.size());
    for (const int64_t size : sizes) TANDEM_CHECK(size >= 1, kStep, ": device_rows holds ", size, " but expected >= 1");
    const int64_t total = std::accumulate(sizes.begin(), sizes.end(), int64_t{0});
    TANDEM_CHECK(total == rows, kStep, ": device_rows add up to ", total, " but the batch has ", rows, " rows");
    checked_batch.key.chunk_rows = sizes;
  }
  checked_batch.key.features = batch.features.shape();
  checked_batch.key.targets = batch.targets.shape();
  checked_batch.key.features_dtype = batch.features.dtype();
  checked_batch.key.targets_dtype = batch.targets.dtype();
  return checked_batch;
}

TrainingStep::Batch TrainingStep::checked_placed(const TrainingBatch& batch) const {
  const std::vector<Tensor>& inputs = batch.inputs;
  const std::vector<Tensor>& labels = batch.labels;
  TANDEM_CHECK(inputs.size() == labels.size() && inputs.size() <= model_.size(), kStep, ": got ", inputs.size(),
               " chunks of features and ", labels.size(), " of targets but expected as many, up to the model's ",
               model_.size(), " devices");
  Batch checked_batch;
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_same_rows(inputs[i], labels[i], ::tandem::detail::concat("chunk ", i, " holds "));
    TANDEM_CHECK(inputs[i].size(0) >= 1, kStep, ": chunk ", i, " has no rows; expected at least one");
    checked_batch.key.chunk_rows.push_back(inputs[i].size(0));
    checked_batch.rows += inputs[i].size(0);
  }
  if (!inputs.empty()) {
    checked_batch.key.features = whole_shape(inputs, model_.devices(), "features");
    checked_batch.key.targets = whole_shape(labels, model_.devices(), "targets");
    checked_batch.key.features_dtype = inputs.front().dtype();
    checked_batch.key.targets_dtype = labels.front().dtype();
  }
  return checked_batch;
}

TrainingStep::Chunks TrainingStep::chunks_of(const Batch& batch) const {
  const TrainingBatch& given = *batch.given;
  if (!given.features.defined()) return {given.inputs, given.labels};
  NoGradGuard no_grad;
  Chunks chunks;
  int64_t start = 0;
  for (const int64_t rows : batch.key.chunk_rows) {
    chunks.inputs.push_back(given.features.narrow(0, start, rows));
    chunks.labels.push_back(given.targets.narrow(0, start, rows));
    start += rows;
  }
  return chunks;
}

Tensor TrainingStep::deliver(const Batch& batch, const Tensor& loss) {
  if (!batch.given->loss_out.defined()) return loss;
  NoGradGuard no_grad;
  Tensor out = batch.given->loss_out;
  out.copy_(loss.reshape(out.shape()));  // on devices[0]'s compute stream
  return out;
}

bool TrainingStep::may_step_in_backward() const {
  // A sharded optimizer steps only after the whole reduce-scatter (Note [Sharded optimizer state]).
  return options_.steps_in_backward && !options_.max_grad_norm && !accumulated_ && optimizer_ != nullptr &&
         optimizer_->steps_in_backward();
}

Tensor TrainingStep::eager(const Batch& batch, std::string reason, bool accumulate) {
  strategy_ = may_step_in_backward() && !accumulate ? StepStrategy::StepsInBackward : StepStrategy::Eager;
  warming_up_ = false;
  fallback_reason_ = std::move(reason);
  if (!accumulate) ++eager_steps_;  // the capture's warm-up counts optimizer steps
  const TrainingBatch& given = *batch.given;
  const std::vector<Device>& devices = model_.devices();
  std::vector<Tensor> inputs = given.inputs;
  std::vector<Tensor> labels = given.labels;
  if (given.features.defined() && given.device_rows.empty() && batch.rows > 0) {
    // One scatter for both: their copies share the stream waits.
    std::vector<std::vector<Tensor>> scattered = comm::scatter_all({given.features, given.targets}, devices);
    inputs = std::move(scattered[0]);
    labels = std::move(scattered[1]);
  } else if (given.features.defined() && batch.rows > 0) {
    const std::vector<int64_t>& sizes = given.device_rows;
    const std::vector<Device> used(devices.begin(), devices.begin() + static_cast<std::ptrdiff_t>(sizes.size()));
    inputs = comm::scatter(given.features, used, sizes);
    labels = comm::scatter(given.targets, used, sizes);
  }
  const int64_t global_rows = batch.key.global_rows;
  std::vector<Tensor> losses(inputs.size());
  // Each replica weights its own loss, on its own thread, before its backward: the scale kernels are issued side by
  // side instead of one after another on the calling thread after the step.
  run_pass(inputs, labels, global_rows,
           {.on_loss =
                [&](size_t i, const Tensor& value) {
                  losses[i] = detail::weighted_losses({value}, {labels[i]}, global_rows).front();
                },
            .accumulate = accumulate});
  return deliver(batch, detail::sum_losses(losses, devices.front()));
}

void TrainingStep::run_pass(const std::vector<Tensor>& inputs, const std::vector<Tensor>& labels, int64_t global_rows,
                            const Pass& pass) {
  const auto take_step = [this, &pass] {
    if (options_.max_grad_norm && sharded_ != nullptr) {
      (void)sharded_->clip_grad_norm(*options_.max_grad_norm);
    } else if (options_.max_grad_norm) {
      NoGradGuard no_grad;
      for (size_t d = 0; d < model_.size(); ++d) {
        const Tensor& gradients = model_.gradient_buffer(d);
        clip_by_norm_(gradients, total_norm({gradients}, 2.0), static_cast<float>(*options_.max_grad_norm));
      }
    }
    if (pass.form == StepForm::Replayable) {
      replayed_.replayable_step();
    } else {
      replayed_.step();
    }
  };
  if (!accumulated_) model_.zero_grad();          // else add to accumulate()'s gradients
  if (pass.accumulate && inputs.empty()) return;  // no rows, no gradients, no collective to take part in
  if (inputs.empty()) {
    // Note [A process without rows] in distributed.cpp: it runs nothing but takes part in every bucket's collective.
    model_.prepare_for_backward(0);
    model_.reduce_gradients();
    take_step();
    return;
  }
  const std::vector<Tensor> seeds = pass.weights != nullptr ? *pass.weights : detail::loss_weights(labels, global_rows);
  const auto observed = [this, &labels, &pass](size_t i, const Tensor& output) {
    Tensor value = loss_(output, labels[i]);
    detail::check_loss_value(i, value);
    pass.on_loss(i, value.detach());
    return value;
  };
  if (pass.accumulate) {
    const ReplicatedModule::NoSync local = model_.no_sync();
    (void)model_.forward_backward(inputs, observed, /*reduce=*/model_.syncing(), pass.threads, seeds);
    return;
  }
  if (!may_step_in_backward()) {
    (void)model_.forward_backward(inputs, observed, /*reduce=*/true, pass.threads, seeds);
    take_step();
    return;
  }
  // Note [Optimizer steps in backward] in steps_in_backward.h.
  StepsInBackward steps(*optimizer_, pass.form);
  (void)model_.forward_backward(inputs, observed, /*reduce=*/true, pass.threads, seeds,
                                [&steps](size_t bucket) { steps.bucket_started(bucket); });
  steps.finish();
}

}  // namespace tandem::parallel
