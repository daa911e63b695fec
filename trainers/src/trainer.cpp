#include "tandem/trainers/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>

#include "prepared_dataset.h"
#include "tandem/core/dtype.h"
#include "tandem/core/error.h"
#include "tandem/core/grad_mode.h"
#include "tandem/core/ops.h"
#include "tandem/core/random.h"
#include "tandem/core/warm_up.h"

namespace tandem::trainers {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point begin) { return std::chrono::duration<double>(Clock::now() - begin).count(); }

TrainerOptions validated(TrainerOptions options) {
  TANDEM_CHECK(options.epochs >= 1, "Trainer: epochs is ", options.epochs, " but expected at least 1");
  TANDEM_CHECK(options.batch_size >= 1, "Trainer: batch_size is ", options.batch_size, " but expected at least 1");
  TANDEM_CHECK(options.accumulate_steps >= 1, "Trainer: accumulate_steps is ", options.accumulate_steps,
               " but expected at least 1 (the batches of each optimizer step)");
  for (const std::string& name : options.resume_may_change) {
    TANDEM_CHECK(name == "lr" || name == "epochs", "Trainer: resume_may_change holds \"", excerpt(name),
                 "\" but only \"lr\" and \"epochs\" may change on a resume");
  }
  TANDEM_CHECK(!options.loss.name.empty() && options.loss.function != nullptr, "Trainer: the loss needs a name and a ",
               "function but got ", options.loss.name.empty() ? "no name" : "no function");
  TANDEM_CHECK(options.loss.units_power >= 0, "Trainer: the loss's units_power is ", options.loss.units_power,
               " but expected >= 0");
  if (options.optimizer) {
    TANDEM_CHECK(!options.optimizer->name.empty() && options.optimizer->make != nullptr, "Trainer: the custom ",
                 "optimizer needs a name and a factory but got ",
                 options.optimizer->name.empty() ? "no name" : "no factory");
  }
  if (options.task == Task::Classification) {
    TANDEM_CHECK(!options.classes.empty(), "Trainer: task is classification but options.classes is empty; expected ",
                 "the labels of the target (ClassLabels::of(data))");
    if (options.loss.name == Loss::mse().name) options.loss = Loss::cross_entropy();
    options.standardize_target = false;
  } else {
    TANDEM_CHECK(options.classes.empty(), "Trainer: options.classes holds ", options.classes.size(),
                 " labels but task is regression; expected none");
  }
  if (options.lr_schedule) {
    TANDEM_CHECK(!options.lr_schedule->name.empty() && options.lr_schedule->make != nullptr, "Trainer: the ",
                 "lr_schedule needs a name and a function but got ",
                 options.lr_schedule->name.empty() ? "no name" : "no function");
  }
  TANDEM_CHECK(options.zero_stage >= 0 && options.zero_stage <= 2, "Trainer: zero_stage is ", options.zero_stage,
               "; expected 0 (replicated optimizer state), 1 (sharded optimizer state) or 2 (sharded optimizer state ",
               "and gradients)");
  TANDEM_CHECK(options.zero_stage == 0 || options.group, "Trainer: zero_stage ", options.zero_stage, " shards the ",
               "optimizer state over a group's devices but there is no group; give options.group (ProcessGroup::",
               "single for one process)");
  if (options.group) {
    TANDEM_CHECK(options.devices.empty() || options.devices == options.group->devices(), "Trainer: devices ",
                 to_string(options.devices), " but the group's are ", to_string(options.group->devices()),
                 "; expected no devices or the group's");
    options.devices = options.group->devices();
  }
  if (options.devices.empty()) options.devices = default_devices();
  for (const Device& device : options.devices) check_device_available(device, "Trainer");
  check_distinct(options.devices, "Trainer");
  return options;
}

std::shared_ptr<nn::Module> placed(std::shared_ptr<nn::Module> model, const TrainerOptions& options) {
  TANDEM_CHECK(model != nullptr, "Trainer: the model is null");
  TANDEM_CHECK(!model->parameters().empty(), "Trainer: the model ", model->name(), " has no parameters");
  model->to(options.devices.front());
  if (options.precision) model->set_precision(*options.precision);  // before the replicas copy it
  return model;
}

// Note [Summed, not averaged]: each replica's loss carries its chunk's share of the global batch (training_step.h), so
// the gradients are summed over every device of every process, as one process sums its replicas' gradients.
std::unique_ptr<parallel::DistributedDataParallel> distributed(std::shared_ptr<nn::Module> model,
                                                               const TrainerOptions& options) {
  if (!options.group) return nullptr;
  return std::make_unique<parallel::DistributedDataParallel>(
      std::move(model), options.group,
      parallel::DistributedOptions{.reduction = comm::ReduceOp::Sum, .zero_stage = options.zero_stage});
}

std::unique_ptr<parallel::ReplicatedOptimizer> optimizer_for(parallel::ReplicatedModule& model,
                                                             const TrainerOptions& options) {
  if (options.optimizer) return std::make_unique<parallel::ReplicatedOptimizer>(model, options.optimizer->make);
  return std::make_unique<parallel::ReplicatedSGD>(model, options.sgd);
}

// The sharded optimizer at zero_stage 1 and 2 (Note [Sharded optimizer state]); null at 0.
std::unique_ptr<parallel::ShardedOptimizer> sharded_for(parallel::DistributedDataParallel* distributed,
                                                        const TrainerOptions& options) {
  if (options.zero_stage == 0) return nullptr;
  if (options.optimizer) return std::make_unique<parallel::ShardedOptimizer>(*distributed, options.optimizer->make);
  return std::make_unique<parallel::ShardedSGD>(*distributed, options.sgd);
}

// One schedule per local device's optimizer (a replica's, or a device's over its shards), so that every device steps
// at the same lr.
std::vector<std::unique_ptr<optim::LRScheduler>> schedules_for(parallel::ReplicatedOptimizer* optimizer,
                                                               parallel::ShardedOptimizer* sharded,
                                                               const TrainerOptions& options) {
  std::vector<std::unique_ptr<optim::LRScheduler>> schedules;
  if (!options.lr_schedule) return schedules;
  const size_t devices = optimizer != nullptr ? optimizer->size() : sharded->size();
  for (size_t d = 0; d < devices; ++d) {
    schedules.push_back(
        options.lr_schedule->make(optimizer != nullptr ? optimizer->optimizer(d) : sharded->optimizer(d)));
  }
  return schedules;
}

// The standardized training rows as the loader's tensors: features float32 [rows, features], converted from float64 as
// DataLoader converts them, and targets [rows, 1]: a regression's in float32 likewise, a classifier's (a table whose
// targets ClassLabels::encode replaced) as the int64 class indices that the loss takes.
TensorDataset training_tensors(const TableDataset& data, Task task) {
  const std::vector<float> features(data.features.begin(), data.features.end());
  const Shape target_shape{data.rows(), 1};
  const Tensor targets =
      task == Task::Classification
          ? Tensor::from_vector(std::vector<int64_t>(data.targets.begin(), data.targets.end()), target_shape)
          : Tensor::from_vector(std::vector<float>(data.targets.begin(), data.targets.end()), target_shape);
  return TensorDataset({Tensor::from_vector(features, {data.rows(), data.num_features()}), targets});
}

// Note [Captured training steps]: fit's steps go through one parallel::TrainingStep over the replicas (and, with a
// group, the DistributedDataParallel). With options.capture, after its eager warm-up, each batch shape's step (the
// full batches', the short last batch's) is captured once as one CUDA graph and replayed, so a step costs the host the
// loader's asynchronous copies from pinned memory (Note [Pinned staging] in loader.cpp), their copies into the graph's
// static buffers, the learning rates' upload (and the generator positions' with Dropout) and one launch, with no wait:
// the loss stays on the device and is read once per epoch (Note [Losses read once per epoch]), an LR schedule's new
// rates reach the replays without a new capture, and an evaluation between epochs (eval mode switched on and back)
// keeps the graphs (Note [Host state of a captured step] in training_step.h). Under a group of several processes each
// process steps on its shard of the global batch, weighted by the global batch's rows, and the processes decide
// together which steps replay (Note [Capturing across processes] in training_step.h): a last global batch that leaves
// some process short of a row per device runs eagerly everywhere. Where nothing can be captured (CPU devices, capture
// off: TrainingStep::blocker()) the steps are eager; where a step's capture fails (a forward that draws on the host,
// such as randn; Dropout's masks are drawn on the devices and replay: Note [Random draws in captured graphs] in
// tandem/core/random.h) it runs eagerly. FitResult says which happened.
std::unique_ptr<parallel::TrainingStep> training_step_for(parallel::DistributedDataParallel* distributed,
                                                          parallel::ReplicatedModule& model,
                                                          parallel::ReplicatedOptimizer* optimizer,
                                                          parallel::ShardedOptimizer* sharded,
                                                          const TrainerOptions& options) {
  const parallel::TrainingStepOptions step_options{.capture = options.capture};
  if (sharded != nullptr) {  // Note [Training steps over shards] in parallel/training_step.h
    return std::make_unique<parallel::TrainingStep>(*distributed, *sharded, options.loss.function, step_options);
  }
  if (distributed != nullptr) {
    return std::make_unique<parallel::TrainingStep>(*distributed, *optimizer, options.loss.function, step_options);
  }
  return std::make_unique<parallel::TrainingStep>(model, *optimizer, options.loss.function, step_options);
}

// Why none of fit's steps can be captured; "" when they may be.
std::string capture_blocker(const parallel::TrainingStep& step, const TrainerOptions& options) {
  if (!options.capture) return "capture is off (TrainerOptions::capture is false)";
  return step.blocker();
}

// The rows of an optimizer step: those of its micro-batches' global batches.
int64_t step_rows(const std::vector<Batch>& micro_batches) {
  int64_t rows = 0;
  for (const Batch& batch : micro_batches) rows += batch.global_rows;
  return rows;
}

}  // namespace

Trainer::Trainer(std::shared_ptr<nn::Module> model, TrainerOptions options)
    : options_(validated(std::move(options))),
      model_(placed(std::move(model), options_)),
      distributed_(distributed(model_, options_)),
      replicas_(distributed_ ? nullptr : std::make_unique<parallel::ReplicatedModule>(model_, options_.devices)),
      optimizer_(options_.zero_stage > 0
                     ? nullptr  // sharded_ at stages 1 and 2
                     : optimizer_for(distributed_ ? distributed_->replicated() : *replicas_, options_)),
      sharded_(sharded_for(distributed_.get(), options_)),
      schedules_(schedules_for(optimizer_.get(), sharded_.get(), options_)),
      training_step_(training_step_for(distributed_.get(), distributed_ ? distributed_->replicated() : *replicas_,
                                       optimizer_.get(), sharded_.get(), options_)),
      capture_blocker_(capture_blocker(*training_step_, options_)),
      shuffle_state_(options_.shuffle_seed) {
  setup();  // refuses options.setup facts that clash with the Trainer's own
}

const parallel::ReplicatedOptimizer& Trainer::optimizer() const {
  TANDEM_CHECK(optimizer_ != nullptr, "Trainer::optimizer: zero_stage ", options_.zero_stage, " shards the ",
               "optimizer state (sharded_optimizer())");
  return *optimizer_;
}

size_t Trainer::optimizer_state_bytes_per_device() const {
  if (optimizer_ != nullptr) return parallel::optimizer_state_bytes(optimizer_->optimizer(0));
  size_t most = 0;
  for (size_t d = 0; d < sharded_->size(); ++d) most = std::max(most, sharded_->optimizer_state_bytes(d));
  return most;
}

size_t Trainer::gradient_bytes_per_device() const {
  const parallel::ReplicatedModule& replicated = distributed_ ? distributed_->replicated() : *replicas_;
  size_t most = 0;
  for (size_t d = 0; d < replicated.size(); ++d) {
    const Tensor& buffer = replicated.gradient_buffer(d);
    most = std::max(most, static_cast<size_t>(buffer.numel()) * element_size(buffer.dtype()));
  }
  return most;
}

void Trainer::add_callback(std::shared_ptr<Callback> callback) {
  TANDEM_CHECK(callback != nullptr, "Trainer::add_callback: the callback is null");
  callbacks_.push_back(std::move(callback));
}

void Trainer::check_fit_start(const std::string& train_data, const std::string& test_data) {
  TANDEM_CHECK(epoch_ <= options_.epochs, "Trainer::fit: already at epoch ", epoch_, " but epochs is ", options_.epochs,
               "; epochs counts all epochs (those before a resume too), so expected at least ", epoch_);
  check_same_training_data(train_data);
  if (options_.group) check_same_setup(*options_.group, setup(), facts_of_this_fit(test_data), "Trainer::fit");
}

FitResult Trainer::fit(const TableDataset& train, const TableDataset& test) {
  const Clock::time_point setup_begin = Clock::now();
  TANDEM_CHECK(train.rows() >= 1, "Trainer::fit: the training set has no rows");
  TANDEM_CHECK(test.rows() == 0 || test.num_features() == train.num_features(), "Trainer::fit: the test set has ",
               test.num_features(), " features but the training set has ", train.num_features());
  check_fit_start(fingerprint(train), fingerprint(test));
  const TableDataset encoded = classifier() ? options_.classes.encode(train) : TableDataset{};
  const TableDataset encoded_test = classifier() && test.rows() > 0 ? options_.classes.encode(test) : TableDataset{};
  const TableDataset& train_set = classifier() ? encoded : train;
  const TableDataset& test_set = classifier() ? encoded_test : test;
  if (!standardizer_) {
    standardizer_ = Standardizer::fit(train_set, options_.standardize_target);
    if (options_.standardize_features == false) {
      std::fill(standardizer_->feature_mean.begin(), standardizer_->feature_mean.end(), 0.0);
      std::fill(standardizer_->feature_scale.begin(), standardizer_->feature_scale.end(), 1.0);
    }
  }
  const TensorDataset rows = training_tensors(standardizer_->apply(train_set), options_.task);
  const EvaluationSet train_eval{resident_features(train_set), train_set.targets};
  const std::optional<EvaluationSet> test_eval =
      test.rows() > 0 ? std::optional(EvaluationSet{resident_features(test_set), test_set.targets}) : std::nullopt;
  return fit_prepared(rows, train_eval, test_eval, setup_begin);
}

FitResult Trainer::fit(const Dataset& train) { return fit_examples(train, nullptr); }

FitResult Trainer::fit(const Dataset& train, const Dataset& test) { return fit_examples(train, &test); }

FitResult Trainer::fit_examples(const Dataset& train, const Dataset* test) {
  const Clock::time_point setup_begin = Clock::now();
  TANDEM_CHECK(train.size() >= 1, "Trainer::fit: the training set has no examples");
  const bool tested = test != nullptr && test->size() > 0;
  check_fit_start(fingerprint(train), tested ? fingerprint(*test) : "no test set");
  if (!standardizer_) {
    standardizer_ =
        Standardizer::fit(train, options_.standardize_features.value_or(false), options_.standardize_target);
  }
  const ClassLabels* classes = classifier() ? &options_.classes : nullptr;
  const detail::PreparedDataset rows(train, *standardizer_, classes);
  const EvaluationSet train_eval = evaluation_set(rows);
  const std::optional<EvaluationSet> test_eval =
      tested ? std::optional(evaluation_set(detail::PreparedDataset(*test, *standardizer_, classes))) : std::nullopt;
  return fit_prepared(rows, train_eval, test_eval, setup_begin);
}

FitResult Trainer::fit_prepared(const Dataset& rows, const EvaluationSet& train_eval,
                                const std::optional<EvaluationSet>& test_eval,
                                std::chrono::steady_clock::time_point setup_begin) {
  // Note [Set-up before the clock]: what the first epoch would otherwise pay for happens before fit's clock starts,
  // and FitResult::setup_seconds says how long it took: (TrainingStep::warm_up_devices) the devices' streams, cuBLAS
  // handles and workspaces, peer access and NCCL communicators; the standardized features of the training and test
  // sets, resident on devices[0] for the evaluations (Note [One read per epoch]); and with options.warm_up, the step of
  // every batch shape on a throwaway copy (Note [Warming the step up on a copy]) and one epoch's end read, evaluating
  // the training and test sets, on the state as it is, whose values are dropped.
  DataLoader loader(rows, {.batch_size = options_.batch_size,
                           .shuffle = true,
                           .seed = options_.shuffle_seed,
                           .num_workers = options_.num_workers,
                           .pin_memory = true,
                           .devices = options_.devices,
                           .sampler = options_.group ? DistributedSampler(*options_.group) : DistributedSampler(),
                           .transform = options_.transform});
  loader.set_shuffle_state(shuffle_state_);
  loader.set_epoch(epoch_);
  training_step_->warm_up_devices();
  const EvaluationSet* test_or_null = test_eval ? &*test_eval : nullptr;
  const bool read_each_step = reads_each_step_loss();
  if (options_.warm_up && epoch_ < options_.epochs) {
    const GeneratorState generator = generator_state();  // Note [Warming the step up on a copy]
    warm_up_step(loader);
    // The training set too, whose outputs a regression's epochs do not need: the final evaluation's shapes.
    (void)read_epoch_end(Tensor::zeros({loader.num_batches()}, options_.devices.front()), /*parameters=*/true,
                         &train_eval, test_or_null);
    set_generator_state(generator);
  }
  notify([&](Callback& callback) { callback.on_fit_begin(*this); });
  StepModes modes;
  const int64_t first_step = step_;
  const Clock::time_point begin = Clock::now();
  while (epoch_ < options_.epochs) {
    const Clock::time_point epoch_begin = Clock::now();
    EpochReport report;
    for (const auto& schedule : schedules_) schedule->set_last_epoch(epoch_);
    const EpochLosses losses = train_epoch(loader, read_each_step, modes);
    ++epoch_;
    shuffle_state_ = loader.shuffle_state();
    const EpochValues values =
        read_epoch_end(losses.on_device, /*parameters=*/true, classifier() ? &train_eval : nullptr, test_or_null);
    report.train_loss = epoch_loss(losses.on_device.defined() ? values.losses : losses.read, losses);
    check_parameters_finite(values.parameter_sums);
    report.epoch = epoch_;
    report.epochs = options_.epochs;
    report.step = step_;
    if (classifier()) {
      report.train_classes = class_metrics(values.train_outputs, train_eval.targets);
      if (test_eval) report.test_classes = class_metrics(values.test_outputs, test_eval->targets);
    } else if (test_eval) {
      report.test = regression_metrics_of(values.test_outputs, test_eval->targets);
    }
    report.seconds = seconds_since(epoch_begin);
    notify([&](Callback& callback) { callback.on_epoch_end(*this, report); });
  }

  FitResult result;
  const EpochValues values = read_epoch_end(Tensor(), /*parameters=*/false, &train_eval, test_or_null);
  if (classifier()) {
    result.train_classes = class_metrics(values.train_outputs, train_eval.targets);
    if (test_eval) result.test_classes = class_metrics(values.test_outputs, test_eval->targets);
  } else {
    result.train = regression_metrics_of(values.train_outputs, train_eval.targets);
    if (test_eval) result.test = regression_metrics_of(values.test_outputs, test_eval->targets);
  }
  result.epochs = epoch_;
  result.steps = step_;
  result.seconds = seconds_since(begin);
  result.setup_seconds = std::chrono::duration<double>(begin - setup_begin).count();
  result.captured_steps = modes.captured;
  if (step_ == first_step) {
    result.eager_reason = "this fit ran no training steps";
  } else if (!modes.eager_reason.empty() || modes.captured > 0) {
    result.eager_reason = modes.eager_reason;
  } else {
    result.eager_reason = modes.warm_up_reason;
  }
  notify([&](Callback& callback) { callback.on_fit_end(*this, result); });
  return result;
}

Tensor Trainer::train_step_on(const std::vector<Batch>& micro_batches, StepModes& modes, const Tensor& loss_slot) {
  // Note [Accumulating micro-batches] in training_step.h: every micro-batch's loss is weighted by its share of all
  // their rows, so the uneven last one of an epoch counts by its rows.
  const int64_t rows = step_rows(micro_batches);
  const auto given = [rows](const Batch& batch, const Tensor& out) {
    return parallel::TrainingBatch{
        .inputs = batch.inputs, .labels = batch.labels, .global_rows = rows, .loss_out = out};
  };
  Tensor shares;  // the accumulated micro-batches' losses
  for (size_t i = 0; i + 1 < micro_batches.size(); ++i) {
    const Tensor share = training_step_->accumulate(given(micro_batches[i], Tensor()));
    shares = shares.defined() ? shares + share : share;
  }
  // The loader's chunks, one per device. With a slot and nothing accumulated, the loss is written straight into it.
  Tensor loss = training_step_->step(given(micro_batches.back(), shares.defined() ? Tensor() : loss_slot));
  if (!capture_blocker_.empty()) {
    modes.eager_reason = capture_blocker_;
  } else if (training_step_->captured()) {
    ++modes.captured;
  } else if (training_step_->warming_up()) {
    modes.warm_up_reason = training_step_->fallback_reason();
  } else {
    modes.eager_reason = training_step_->fallback_reason();
  }
  if (!shares.defined()) return loss;
  NoGradGuard no_grad;
  loss = shares + loss;
  if (!loss_slot.defined()) return loss;
  Tensor slot = loss_slot;
  slot.copy_(loss.reshape(slot.shape()));
  return slot;
}

Trainer::EpochLosses Trainer::train_epoch(DataLoader& loader, bool read_each_step, StepModes& modes) {
  loader.begin_epoch();
  const double to_original = loss_to_original();
  const int64_t batches = loader.num_batches();
  const int64_t per_step = options_.accumulate_steps;
  const int64_t steps = (batches + per_step - 1) / per_step;  // the last one on the rest
  const bool alone = !options_.group || options_.group->size() == 1;
  EpochLosses losses;
  losses.epoch = epoch_ + 1;
  losses.first_step = step_;
  losses.batches = steps;
  StepReport report;
  report.epoch = losses.epoch;
  report.epochs = options_.epochs;
  report.num_batches = steps;
  // Note [Losses read once per epoch] (callback.h): each step's (local) loss goes to its slot on the first device.
  if (!read_each_step) losses.on_device = Tensor::zeros({steps}, options_.devices.front());
  for (int64_t b = 0; b < steps; ++b) {
    std::vector<Batch> micro_batches;
    for (int64_t m = b * per_step; m < std::min(batches, (b + 1) * per_step); ++m)
      micro_batches.push_back(loader.batch(m));
    const Tensor slot = read_each_step ? Tensor() : losses.on_device.narrow(0, b, 1);
    const Tensor loss = train_step_on(micro_batches, modes, slot);
    losses.rows.push_back(step_rows(micro_batches));
    if (read_each_step) {
      // The same on every process: all stop at once on a NaN.
      losses.read.push_back(global_sum(loss.reshape({1})).to_vector().front());
      report.loss = losses.read.back() * to_original;
      check_loss(report.loss, losses, b);
      report.read_loss = [value = report.loss] { return std::optional<double>(value); };
    } else {
      report.read_loss = nullptr;
      if (alone) {
        report.read_loss = [slot, to_original] { return std::optional<double>(slot.item() * to_original); };
      }
    }
    ++step_;
    report.batch = b + 1;
    report.step = step_;
    notify([&](Callback& callback) { callback.on_step_end(*this, report); });
  }
  return losses;
}

double Trainer::loss_to_original() const {
  double to_original = 1.0;  // target_scale^units_power (for MSE target_scale * target_scale, exactly)
  for (int i = 0; i < options_.loss.units_power; ++i) to_original *= standardizer_->target_scale;
  return to_original;
}

double Trainer::epoch_loss(const std::vector<float>& global_losses, const EpochLosses& losses) const {
  const double to_original = loss_to_original();
  if (losses.on_device.defined()) {  // read at the epoch's end: checked now, before anything else of the epoch
    for (size_t b = 0; b < global_losses.size(); ++b) check_loss(global_losses[b] * to_original, losses, b);
  }
  double loss_sum = 0.0;
  int64_t total_rows = 0;
  for (size_t b = 0; b < global_losses.size(); ++b) {
    loss_sum += global_losses[b] * to_original * static_cast<double>(losses.rows[b]);
    total_rows += losses.rows[b];
  }
  return loss_sum / static_cast<double>(total_rows);
}

void Trainer::check_loss(double loss, const EpochLosses& losses, size_t batch) const {
  if (std::isfinite(loss)) return;
  const auto step = static_cast<int64_t>(batch) + 1;
  TANDEM_FAIL("Trainer::fit: the loss is ", loss, " at epoch ", losses.epoch, ", step ", step, " of ", losses.batches,
              " (step ", losses.first_step + step, " overall); ", stopped_note());
}

Tensor Trainer::global_sum(const Tensor& local) const {
  if (!options_.group || options_.group->size() == 1) return local;
  comm::ProcessGroup& group = *options_.group;
  // One tensor per local device: this process's values on the first, zeros elsewhere; the Sum adds the processes'.
  std::vector<Tensor> parts;
  for (const Device& device : group.devices()) {
    parts.push_back(parts.empty() ? local.contiguous() : Tensor::zeros(local.shape(), device));
  }
  group.all_reduce(parts, comm::ReduceOp::Sum);
  return parts.front();
}

bool Trainer::reads_each_step_loss() const {
  const bool wanted = primary() && std::any_of(callbacks_.begin(), callbacks_.end(),
                                               [](const auto& callback) { return callback->needs_step_loss(); });
  // Every process must agree, since each step's read is then a collective.
  if (!options_.group || options_.group->size() == 1) return wanted;
  return global_sum(Tensor::full({1}, wanted ? 1.0f : 0.0f, options_.devices.front())).to_vector().front() > 0.0f;
}

// Note [Warming the step up on a copy]: a fit's first steps pay for what happens once per process or once per batch
// shape: CUDA loads each kernel at its first launch (lazy module loading), cuBLASLt picks a plan per matrix shape,
// the caching allocator grows, and the first graph capture and instantiation set up their machinery. Before the
// clock, warm_up_step takes the step of each batch shape (the full batches' and the short last batch's) on a
// throwaway copy: the master cloned (training modes and precision included), replicated onto the devices, with an
// optimizer and a TrainingStep of its own, for enough steps to run the eager warm-up, then capture and replay every
// shape. (Under a group of several processes it takes none: a copy's steps would be collectives of their own, and
// the processes decide their captures together, Note [Capturing across processes] in training_step.h.) What it must
// not change, it does not touch: the model and its replicas, the optimizer and its state, the Trainer's TrainingStep
// and its graphs, the counters and the loader's shuffle state (batch() before begin_epoch
// reads the unshuffled order and draws nothing); the global generator, which a Dropout forward draws from (and a
// custom layer may draw from in eval mode too, so in the epoch's end read that follows), is restored by fit after
// both. So a fit's results are those of a fit without it (TrainerOptions::warm_up), exactly. The Trainer's own
// TrainingStep still takes its eager steps and captures its graphs in the first epoch, with the kernels loaded, the
// plans chosen and the memory cached. It costs a copy of the model per device for as long as it runs.
void Trainer::warm_up_step(const DataLoader& loader) const {
  const int64_t batches = loader.num_batches();
  if (batches == 0 || (options_.group && options_.group->size() > 1)) return;
  std::vector<Batch> shapes = {loader.batch(0)};
  if (batches > 1) shapes.push_back(loader.batch(batches - 1));
  {
    parallel::ReplicatedModule copy(model_->clone(), options_.devices);
    const std::unique_ptr<parallel::ReplicatedOptimizer> optimizer = optimizer_for(copy, options_);
    const parallel::TrainingStepOptions capture{.capture = capture_blocker_.empty()};
    parallel::TrainingStep step(copy, *optimizer, options_.loss.function, capture);
    Tensor loss;
    for (int round = 0; round <= capture.warmup_steps; ++round) {
      for (const Batch& batch : shapes) loss = step.step({.inputs = batch.inputs, .labels = batch.labels});
    }
    (void)loss.to_vector();  // waits for the last step, which follows every earlier one on every device
  }
}

template <class Event>
void Trainer::notify(const Event& event) const {
  for (const auto& callback : callbacks_) {
    if (primary() || callback->on_every_rank()) event(*callback);
  }
}

void Trainer::check_parameters_finite(const std::vector<float>& sums) const {
  const auto named = model_->named_parameters();
  for (size_t i = 0; i < named.size(); ++i) {
    TANDEM_CHECK(std::isfinite(sums.at(i)), "Trainer::fit: parameter ", named[i].first, " is not finite after epoch ",
                 epoch_, " (step ", step_, "); ", stopped_note());
  }
}

std::string Trainer::stopped_note() const {
  if (!last_checkpoint_) return "training stopped; no checkpoint was written (try a smaller learning rate)";
  return "training stopped; the last checkpoint, \"" + last_checkpoint_->path + "\" (epoch " +
         std::to_string(last_checkpoint_->epoch) + "), holds the last good state (try a smaller learning rate)";
}

}  // namespace tandem::trainers
