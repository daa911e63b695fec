#include "tandem/trainers/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <set>

#include "tandem/comm/comm.h"
#include "tandem/core/error.h"
#include "tandem/core/grad_mode.h"
#include "tandem/core/ops.h"
#include "tandem/core/random.h"
#include "tandem/core/warm_up.h"
#include "tandem/nn/training_mode_guard.h"
#include "tandem/trainers/checkpoint.h"
#include "tandem/trainers/train_step.h"

namespace tandem::trainers {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point begin) { return std::chrono::duration<double>(Clock::now() - begin).count(); }

TrainerOptions validated(TrainerOptions options) {
  TANDEM_CHECK(options.epochs >= 1, "Trainer: epochs is ", options.epochs, " but expected at least 1");
  TANDEM_CHECK(options.batch_size >= 1, "Trainer: batch_size is ", options.batch_size, " but expected at least 1");
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

// Note [Summed, not averaged]: each replica's loss carries its chunk's share of the global batch (train_step.h), so
// the gradients are summed over every device of every process, as one process sums its replicas' gradients.
std::unique_ptr<parallel::DistributedDataParallel> distributed(std::shared_ptr<nn::Module> model,
                                                               const TrainerOptions& options) {
  if (!options.group) return nullptr;
  return std::make_unique<parallel::DistributedDataParallel>(
      std::move(model), options.group, parallel::DistributedOptions{.reduction = comm::ReduceOp::Sum});
}

std::unique_ptr<parallel::ReplicatedOptimizer> optimizer_for(parallel::ReplicatedModule& model,
                                                             const TrainerOptions& options) {
  if (options.optimizer) return std::make_unique<parallel::ReplicatedOptimizer>(model, options.optimizer->make);
  return std::make_unique<parallel::ReplicatedSGD>(model, options.sgd);
}

// One schedule per replica's optimizer, so that every replica steps at the same lr.
std::vector<std::unique_ptr<optim::LRScheduler>> schedules_for(parallel::ReplicatedOptimizer& optimizer,
                                                               const TrainerOptions& options) {
  std::vector<std::unique_ptr<optim::LRScheduler>> schedules;
  if (!options.lr_schedule) return schedules;
  for (size_t d = 0; d < optimizer.size(); ++d) schedules.push_back(options.lr_schedule->make(optimizer.optimizer(d)));
  return schedules;
}

// The standardized training rows as the loader's tensors: features [rows, features] and targets [rows, 1] in float32,
// converted from float64 as DataLoader converts them.
TensorDataset training_tensors(const Dataset& data) {
  const std::vector<float> features(data.features.begin(), data.features.end());
  const std::vector<float> targets(data.targets.begin(), data.targets.end());
  return TensorDataset({Tensor::from_vector(features, {data.rows(), data.num_features()}),
                        Tensor::from_vector(targets, {data.rows(), 1})});
}

// Predictions in batches of this many rows (no gradients, so the size only bounds memory).
constexpr int64_t kPredictBatch = 65536;

// Note [Captured training steps]: with options.capture, fit's steps go through a parallel::CapturedStep over the
// replicas: after its eager warm-up, each batch shape's step (the full batches', the short last batch's) is captured
// once as one CUDA graph and replayed, so a step costs the host the loader's asynchronous copies from its pinned
// staging (TensorDataLoader), their copies into the graph's static buffers, the learning rates' upload and one
// launch, with no wait: the loss stays on the device and is read once per epoch (Note [Losses read once per epoch]),
// an LR schedule's new rates reach the replays without a new capture, and an evaluation between epochs (eval mode
// switched on and back) keeps the graphs (Note [Host state of a captured step] in captured_step.h). Where nothing can
// be captured (CPU devices, a group of several processes, capture off: CapturedStep::blocker()) the steps are
// train_step's, unchanged; where a step's capture fails (Dropout draws its masks on the host) CapturedStep runs it
// eagerly. FitResult says which happened.
std::unique_ptr<parallel::CapturedStep> captured_step_for(parallel::ReplicatedModule& model,
                                                          parallel::ReplicatedOptimizer& optimizer,
                                                          const TrainerOptions& options) {
  return std::make_unique<parallel::CapturedStep>(model, optimizer, options.loss.function,
                                                  parallel::CaptureOptions{.enabled = options.capture});
}

// Why none of fit's steps can be captured; "" when they may be.
std::string capture_blocker(const parallel::CapturedStep& step, const TrainerOptions& options) {
  if (!options.capture) return "capture is off (TrainerOptions::capture is false)";
  return step.blocker();
}

}  // namespace

Trainer::Trainer(std::shared_ptr<nn::Module> model, TrainerOptions options)
    : options_(validated(std::move(options))),
      model_(placed(std::move(model), options_)),
      distributed_(distributed(model_, options_)),
      replicas_(distributed_ ? nullptr : std::make_unique<parallel::ReplicatedModule>(model_, options_.devices)),
      optimizer_(optimizer_for(distributed_ ? distributed_->replicated() : *replicas_, options_)),
      schedules_(schedules_for(*optimizer_, options_)),
      captured_(captured_step_for(distributed_ ? distributed_->replicated() : *replicas_, *optimizer_, options_)),
      capture_blocker_(capture_blocker(*captured_, options_)),
      shuffle_state_(options_.shuffle_seed) {
  setup();  // refuses options.setup facts that clash with the Trainer's own
}

void Trainer::add_callback(std::shared_ptr<Callback> callback) {
  TANDEM_CHECK(callback != nullptr, "Trainer::add_callback: the callback is null");
  callbacks_.push_back(std::move(callback));
}

FitResult Trainer::fit(const Dataset& train, const Dataset& test) {
  TANDEM_CHECK(train.rows() >= 1, "Trainer::fit: the training set has no rows");
  TANDEM_CHECK(epoch_ <= options_.epochs, "Trainer::fit: already at epoch ", epoch_, " but epochs is ", options_.epochs,
               "; epochs counts all epochs (those before a resume too), so expected at least ", epoch_);
  check_same_training_data(train);
  TANDEM_CHECK(test.rows() == 0 || test.num_features() == train.num_features(), "Trainer::fit: the test set has ",
               test.num_features(), " features but the training set has ", train.num_features());
  const Dataset encoded = classifier() ? options_.classes.encode(train) : Dataset{};
  if (classifier() && test.rows() > 0) options_.classes.encode(test);  // refuses unknown labels before training
  const Dataset& train_set = classifier() ? encoded : train;
  if (!standardizer_) standardizer_ = Standardizer::fit(train_set, options_.standardize_target);

  // Note [Set-up before the clock]: what the first step would otherwise create lazily exists before fit's clock
  // starts: the loader's pinned staging buffers, and (warm_up_devices) the devices' streams, cuBLAS handles and
  // workspaces, peer access and NCCL communicators. The first step still fills the caching allocator and picks
  // cuBLASLt plans, which depend on the shapes it meets.
  TensorDataLoader loader(training_tensors(standardizer_->apply(train_set)),
                          {.batch_size = options_.batch_size,
                           .shuffle = true,
                           .seed = options_.shuffle_seed,
                           .pin_memory = true,
                           .devices = options_.devices,
                           .sampler = options_.group ? DistributedSampler(*options_.group) : DistributedSampler()});
  loader.set_shuffle_state(shuffle_state_);
  warm_up_devices();
  const bool read_each_step = reads_each_step_loss();
  notify([&](Callback& callback) { callback.on_fit_begin(*this); });
  StepModes modes;
  const int64_t first_step = step_;
  const Clock::time_point begin = Clock::now();
  while (epoch_ < options_.epochs) {
    const Clock::time_point epoch_begin = Clock::now();
    EpochReport report;
    for (const auto& schedule : schedules_) schedule->set_last_epoch(epoch_);
    report.train_loss = train_epoch(loader, read_each_step, modes);
    ++epoch_;
    shuffle_state_ = loader.shuffle_state();
    check_parameters_finite();
    report.epoch = epoch_;
    report.epochs = options_.epochs;
    report.step = step_;
    if (classifier()) {
      report.train_classes = evaluate_classes(train);
      if (test.rows() > 0) report.test_classes = evaluate_classes(test);
    } else if (test.rows() > 0) {
      report.test = evaluate(test);
    }
    report.seconds = seconds_since(epoch_begin);
    notify([&](Callback& callback) { callback.on_epoch_end(*this, report); });
  }

  FitResult result;
  if (classifier()) {
    result.train_classes = evaluate_classes(train);
    if (test.rows() > 0) result.test_classes = evaluate_classes(test);
  } else {
    result.train = evaluate(train);
    if (test.rows() > 0) result.test = evaluate(test);
  }
  result.epochs = epoch_;
  result.steps = step_;
  result.seconds = seconds_since(begin);
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

void Trainer::check_same_training_data(const Dataset& train) {
  const std::string current = fingerprint(train);
  if (resumed_ && resumed_->train_data != current) {
    TANDEM_FAIL("Trainer::fit: the training data differs from the data of the checkpoint '", resumed_->path,
                "' being resumed: ", resumed_->train_data, " there, ", current, " now");
  }
  train_data_ = current;
}

SetupFacts Trainer::setup() const {
  SetupFacts facts = options_.setup;
  const auto add = [&](const std::string& name, std::string value) {
    TANDEM_CHECK(facts.emplace(name, std::move(value)).second, "Trainer: options.setup must not set \"", name,
                 "\", which the Trainer records itself");
  };
  add("model", describe_module(*model_));
  add("loss", options_.loss.name);
  if (options_.precision && *options_.precision != Precision::Float32)
    add("precision", precision_name(*options_.precision));
  if (options_.optimizer) {
    add("optimizer", options_.optimizer->name);
  } else {
    const optim::SGDOptions& sgd = options_.sgd;
    add("optimizer", "sgd");
    add("lr", exact_text(sgd.lr));
    add("momentum", exact_text(sgd.momentum));
    add("weight_decay", exact_text(sgd.weight_decay));
    add("dampening", exact_text(sgd.dampening));
    add("nesterov", sgd.nesterov ? "true" : "false");
  }
  add("batch_size", std::to_string(options_.batch_size));
  add("shuffle_seed", std::to_string(options_.shuffle_seed));
  add("standardize_target", options_.standardize_target ? "true" : "false");
  add("epochs", std::to_string(options_.epochs));
  if (options_.lr_schedule) add("lr_schedule", options_.lr_schedule->name);
  if (classifier()) {
    add("task", "classification");
    add("classes", options_.classes.str());
  }
  if (train_data_) add("train_data", *train_data_);
  return facts;
}

Tensor Trainer::train_step_on(const TensorBatch& batch, StepModes& modes, const Tensor& loss_slot) {
  if (!capture_blocker_.empty()) {
    modes.eager_reason = capture_blocker_;
    const Tensor loss = distributed_ ? train_step(*distributed_, *optimizer_, batch, options_.loss.function)
                                     : train_step(*replicas_, *optimizer_, batch, options_.loss.function);
    if (!loss_slot.defined()) return loss;
    NoGradGuard no_grad;
    Tensor(loss_slot).copy_(loss.reshape(loss_slot.shape()));  // on the device: the host does not wait
    return loss_slot;
  }
  std::vector<Tensor> inputs, labels;  // the loader's parts: {features, targets} per device
  for (const std::vector<Tensor>& part : batch.parts) {
    inputs.push_back(part.at(0));
    labels.push_back(part.at(1));
  }
  // With a slot, a replay copies its loss straight into it.
  Tensor loss =
      loss_slot.defined() ? captured_->step_chunks(inputs, labels, loss_slot) : captured_->step_chunks(inputs, labels);
  if (captured_->captured()) {
    ++modes.captured;
  } else if (captured_->warming_up()) {
    modes.warm_up_reason = captured_->fallback_reason();
  } else {
    modes.eager_reason = captured_->fallback_reason();
  }
  return loss;
}

double Trainer::train_epoch(TensorDataLoader& loader, bool read_each_step, StepModes& modes) {
  loader.begin_epoch();
  double to_original = 1.0;  // target_scale^units_power (for MSE target_scale * target_scale, exactly)
  for (int i = 0; i < options_.loss.units_power; ++i) to_original *= standardizer_->target_scale;
  const int64_t batches = loader.num_batches();
  const int64_t first_step = step_;
  const bool alone = !options_.group || options_.group->size() == 1;
  StepReport report;
  report.epoch = epoch_ + 1;
  report.epochs = options_.epochs;
  report.num_batches = batches;
  const Tensor on_device = read_each_step ? Tensor() : Tensor::zeros({batches}, options_.devices.front());
  std::vector<float> losses(static_cast<size_t>(batches));  // the global losses, once read
  std::vector<int64_t> rows(static_cast<size_t>(batches));
  for (int64_t b = 0; b < batches; ++b) {
    const TensorBatch batch = loader.batch(b);
    // Note [Losses read once per epoch] (callbacks.h): each step's (local) loss goes to its slot on the first device.
    const Tensor slot = read_each_step ? Tensor() : on_device.narrow(0, b, 1);
    const Tensor loss = train_step_on(batch, modes, slot);
    rows[static_cast<size_t>(b)] = batch.global_rows;
    if (read_each_step) {
      // The same on every process: all stop at once on a NaN.
      losses[static_cast<size_t>(b)] = global_sums(loss.reshape({1})).front();
      report.loss = losses[static_cast<size_t>(b)] * to_original;
      check_loss(report.loss, report.epoch, b, batches, first_step);
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
  if (!read_each_step) {
    losses = global_sums(on_device);  // one read, and under a group one all-reduce, for the whole epoch
    for (int64_t b = 0; b < batches; ++b) {
      check_loss(losses[static_cast<size_t>(b)] * to_original, report.epoch, b, batches, first_step);
    }
  }
  double loss_sum = 0.0;
  int64_t total_rows = 0;
  for (size_t b = 0; b < losses.size(); ++b) {
    loss_sum += losses[b] * to_original * static_cast<double>(rows[b]);
    total_rows += rows[b];
  }
  return loss_sum / static_cast<double>(total_rows);
}

void Trainer::check_loss(double loss, int64_t epoch, int64_t batch, int64_t batches, int64_t first_step) const {
  if (std::isfinite(loss)) return;
  TANDEM_FAIL("Trainer::fit: the loss is ", loss, " at epoch ", epoch, ", step ", batch + 1, " of ", batches, " (step ",
              first_step + batch + 1, " overall); ", stopped_note());
}

std::vector<float> Trainer::global_sums(const Tensor& local) const {
  if (!options_.group || options_.group->size() == 1) return local.to_vector();
  comm::ProcessGroup& group = *options_.group;
  // One tensor per local device: this process's values on the first, zeros elsewhere; the Sum adds the processes'.
  std::vector<Tensor> parts;
  for (const Device& device : group.devices()) {
    parts.push_back(parts.empty() ? local.contiguous() : Tensor::zeros(local.shape(), device));
  }
  group.all_reduce(parts, comm::ReduceOp::Sum);
  return parts.front().to_vector();
}

bool Trainer::reads_each_step_loss() const {
  const bool wanted = primary() && std::any_of(callbacks_.begin(), callbacks_.end(),
                                               [](const auto& callback) { return callback->needs_step_loss(); });
  // Every process must agree, since each step's read is then a collective.
  if (!options_.group || options_.group->size() == 1) return wanted;
  return global_sums(Tensor::full({1}, wanted ? 1.0f : 0.0f, options_.devices.front())).front() > 0.0f;
}

void Trainer::warm_up_devices() const {
  if (options_.group && options_.group->size() > 1) {
    tandem::warm_up(options_.devices);  // the group created its NCCL communicator when it was created
  } else {
    comm::warm_up(options_.devices);  // with the communicators of the replicas' gradient sums
  }
}

template <class Event>
void Trainer::notify(const Event& event) const {
  if (!primary()) return;
  for (const auto& callback : callbacks_) event(*callback);
}

void Trainer::check_parameters_finite() const {
  NoGradGuard no_grad;
  const auto named = model_->named_parameters();
  std::vector<Tensor> sums;  // each parameter's sum, read at once: one host wait per epoch
  for (const auto& [name, parameter] : named) sums.push_back(sum(parameter).reshape({1}));
  const std::vector<float> values = cat(sums).to_vector();
  for (size_t i = 0; i < named.size(); ++i) {
    TANDEM_CHECK(std::isfinite(values[i]), "Trainer::fit: parameter ", named[i].first, " is not finite after epoch ",
                 epoch_, " (step ", step_, "); ", stopped_note());
  }
}

std::string Trainer::stopped_note() const {
  if (!last_checkpoint_) return "training stopped; no checkpoint was written (try a smaller learning rate)";
  return "training stopped; the last checkpoint, \"" + last_checkpoint_->path + "\" (epoch " +
         std::to_string(last_checkpoint_->epoch) + "), holds the last good state (try a smaller learning rate)";
}

std::vector<float> Trainer::outputs(const Dataset& standardized, int64_t width, const char* who) const {
  std::vector<float> values;
  if (standardized.rows() == 0) return values;
  DataLoader loader(standardized, kPredictBatch, /*shuffle=*/false, 0);
  loader.begin_epoch();
  NoGradGuard no_grad;
  nn::TrainingModeGuard eval_mode(*model_, /*training=*/false);
  for (int64_t b = 0; b < loader.num_batches(); ++b) {
    Batch batch = loader.batch(b);
    Tensor output = model_->forward(batch.features.to(options_.devices.front()));
    const int64_t rows = batch.targets.numel();
    const bool fits = width == 1 ? output.numel() == rows : output.dim() == 2 && output.size(0) == rows &&
                                                                output.size(1) == width;
    TANDEM_CHECK(fits, who, ": the model's output has shape ", to_string(output.shape()), " for ", rows,
                 " rows but expected ", width == 1 ? "one value per row" : "[rows, " + std::to_string(width) +
                 "] (a score per class)");
    const std::vector<float> part = output.contiguous().to_vector();
    values.insert(values.end(), part.begin(), part.end());
  }
  return values;
}

std::vector<double> Trainer::predict(const Dataset& data) const {
  TANDEM_CHECK(standardizer_.has_value(), "Trainer::predict: no standardization yet; call fit() or load_checkpoint()",
               " first");
  std::vector<double> predictions;
  if (!classifier()) {
    for (float value : outputs(standardizer_->apply(data), 1, "Trainer::predict")) {
      predictions.push_back(standardizer_->target_to_original(value));
    }
    return predictions;
  }
  const int64_t classes = options_.classes.size();
  const std::vector<float> scores = outputs(standardizer_->apply(data), classes, "Trainer::predict");
  for (size_t row = 0; row < scores.size(); row += classes) {
    const auto first = scores.begin() + static_cast<std::ptrdiff_t>(row);
    const int64_t best = std::max_element(first, first + classes) - first;
    predictions.push_back(static_cast<double>(options_.classes.labels()[best]));
  }
  return predictions;
}

RegressionMetrics Trainer::evaluate(const Dataset& data) const {
  TANDEM_CHECK(!classifier(), "Trainer::evaluate: the task is classification; use evaluate_classes");
  TANDEM_CHECK(data.rows() >= 1, "Trainer::evaluate: the data set has no rows");
  return regression_metrics(predict(data), data.targets);
}

ClassificationMetrics Trainer::evaluate_classes(const Dataset& data) const {
  TANDEM_CHECK(classifier(), "Trainer::evaluate_classes: the task is regression; use evaluate");
  TANDEM_CHECK(data.rows() >= 1, "Trainer::evaluate_classes: the data set has no rows");
  TANDEM_CHECK(standardizer_.has_value(), "Trainer::evaluate_classes: no standardization yet; call fit() or ",
               "load_checkpoint() first");
  const Dataset encoded = options_.classes.encode(data);
  const int64_t classes = options_.classes.size();
  const std::vector<float> scores = outputs(standardizer_->apply(encoded), classes, "Trainer::evaluate_classes");
  return classification_metrics(scores, std::vector<int64_t>(encoded.targets.begin(), encoded.targets.end()),
                                classes);
}

void Trainer::save_checkpoint(const std::string& path) const {
  TANDEM_CHECK(standardizer_.has_value(), "Trainer::save_checkpoint: nothing to save before fit()");
  Checkpoint checkpoint;
  checkpoint.model_state = model_->state_dict();
  checkpoint.optimizer = optimizer_->state_dict();
  checkpoint.epoch = epoch_;
  checkpoint.step = step_;
  checkpoint.generator = generator_state();
  checkpoint.shuffle_state = shuffle_state_;
  checkpoint.standardizer = *standardizer_;
  checkpoint.setup = setup();
  if (primary()) trainers::save_checkpoint(checkpoint, path);
  last_checkpoint_ = WrittenCheckpoint{path, epoch_};
}

namespace {

// Throws unless every element of `tensor` is finite (integer tensors always are), naming the first that is not.
void check_finite(const Tensor& tensor, const std::string& what, const std::string& path) {
  if (!is_floating_point(tensor.dtype())) return;
  const std::vector<float> values = tensor.to(DType::Float32).to_vector();
  for (size_t i = 0; i < values.size(); ++i) {
    TANDEM_CHECK(std::isfinite(values[i]), "Trainer::load_checkpoint: '", path, "' holds ", values[i], " at element ",
                 i, " of ", what, "; the checkpoint is corrupt (a run stops before it would save non-finite values)");
  }
}

// A tensor the model expects in a checkpoint: a parameter, a buffer or (version 3) a parameter's momentum buffer.
struct Expected {
  std::string name;
  Tensor tensor;  // the model's: the shape and dtype the checkpoint's must have
  const char* kind;
};

std::vector<Expected> expected(const std::vector<std::pair<std::string, Tensor>>& named, const char* kind) {
  std::vector<Expected> slots;
  for (const auto& [name, tensor] : named) slots.push_back({name, tensor, kind});
  return slots;
}

// The checkpoint's tensors in the order of `slots`, checked by name, shape, dtype and finite values; entries stay
// undefined for names the checkpoint does not hold. `stored_kind` names the checkpoint's tensors in messages.
std::vector<Tensor> matched(const std::vector<Expected>& slots,
                            const std::vector<std::pair<std::string, Tensor>>& stored, const char* stored_kind,
                            const std::string& path) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < slots.size(); ++i) index[slots[i].name] = i;
  std::vector<Tensor> values(slots.size());
  for (const auto& [name, tensor] : stored) {
    const auto found = index.find(name);
    TANDEM_CHECK(found != index.end(), "Trainer::load_checkpoint: '", path, "' has a ", stored_kind, " for ",
                 excerpt(name), " which the model does not have");
    const Expected& slot = slots[found->second];
    TANDEM_CHECK(tensor.shape() == slot.tensor.shape(), "Trainer::load_checkpoint: ", slot.kind, " ", name,
                 " has shape ", to_string(tensor.shape()), " in '", path, "' but ", to_string(slot.tensor.shape()),
                 " in the model");
    TANDEM_CHECK(tensor.dtype() == slot.tensor.dtype(), "Trainer::load_checkpoint: ", slot.kind, " ", name, " is ",
                 tensor.dtype(), " in '", path, "' but ", slot.tensor.dtype(), " in the model");
    check_finite(tensor, std::string(slot.kind) + " " + name, path);
    values[found->second] = tensor;
  }
  return values;
}

// Every value of the optimizer state finite, each named by its parameter (the state's count and shapes are checked
// by the optimizer's load_state_dict).
void check_finite(const optim::OptimizerState& state, const std::vector<std::pair<std::string, Tensor>>& parameters,
                  const std::string& path) {
  for (size_t i = 0; i < state.parameters.size(); ++i) {
    const std::string parameter = i < parameters.size() ? parameters[i].first : "#" + std::to_string(i);
    for (const auto& [slot, tensor] : state.parameters[i].tensors) {
      check_finite(tensor, "optimizer state " + slot + " of parameter " + parameter, path);
    }
  }
}

}  // namespace

void Trainer::load_checkpoint(const std::string& path) {
  // Note [All-or-nothing resume]: everything that can be wrong with the file is checked before the first write to
  // the model, the optimizer or the counters, so a refused checkpoint leaves the Trainer exactly as it was. The
  // optimizer's load_state_dict (set_state for version 3) is the last check and the first write: it checks the whole
  // state before it writes anything, and every replica's optimizer takes the same state over parameters of the same
  // shapes, so once the first accepts it, the rest does too.
  Checkpoint checkpoint = trainers::load_checkpoint(path);
  const std::vector<std::string> differences = setup_differences(checkpoint.setup, setup(), [&] {
    std::set<std::string> ignored = options_.resume_may_change;
    ignored.insert("train_data");  // compared when fit() sees the data
    return ignored;
  }());
  if (!differences.empty()) {
    std::string list;
    for (const std::string& difference : differences) list += (list.empty() ? "" : "; ") + difference;
    throw SetupMismatch("Trainer::load_checkpoint: '" + path + "' belongs to another setup: " + list +
                        " (only lr and epochs may be allowed to change, through resume_may_change)");
  }
  TANDEM_CHECK(checkpoint.setup.contains("train_data"), "Trainer::load_checkpoint: '", path,
               "' records no train_data fact (every checkpoint of a fit does)");
  TANDEM_CHECK(checkpoint.epoch <= options_.epochs, "Trainer::load_checkpoint: '", path, "' is at epoch ",
               checkpoint.epoch, " but epochs is ", options_.epochs,
               "; epochs counts all epochs (those before a resume too)");

  const auto parameters = model_->named_parameters();
  const auto buffers = model_->named_buffers();
  const bool version3 = checkpoint.version == 3;
  if (version3 && !buffers.empty()) {
    TANDEM_FAIL("Trainer::load_checkpoint: '", path, "' is a version 3 checkpoint, which keeps no buffers, but the ",
                "model has ", buffers.size(), " (", buffers.front().first, ", ...); its running statistics cannot be ",
                "restored, so the run would not continue exactly");
  }
  std::vector<Expected> slots = expected(parameters, "parameter");
  for (Expected& slot : expected(buffers, "buffer")) slots.push_back(std::move(slot));
  const std::vector<Tensor> values = matched(slots, checkpoint.model_state, "model tensor", path);
  for (size_t i = 0; i < slots.size(); ++i) {
    TANDEM_CHECK(values[i].defined(), "Trainer::load_checkpoint: '", path, "' has no ", slots[i].kind, " ",
                 slots[i].name);
  }
  const std::vector<Tensor> momentum_buffers =
      matched(expected(parameters, "momentum buffer"), checkpoint.momentum_buffers, "momentum buffer", path);
  if (!version3) check_finite(checkpoint.optimizer, parameters, path);
  try {
    if (version3) {
      optimizer_->set_state(momentum_buffers);
    } else {
      optimizer_->load_state_dict(checkpoint.optimizer);
    }
  } catch (const InternalError&) {
    throw;
  } catch (const Error& e) {
    TANDEM_FAIL("Trainer::load_checkpoint: '", path, "' holds an optimizer state that does not fit the optimizer: ",
                e.what());
  }

  {
    NoGradGuard no_grad;
    for (size_t i = 0; i < slots.size(); ++i) slots[i].tensor.copy_(values[i]);
  }
  if (distributed_) {
    distributed_->sync_parameters();  // rank 0's values, to every process and replica
  } else {
    replicas_->sync_parameters();
  }
  (distributed_ ? distributed_->replicated() : *replicas_).sync_buffers();  // each process read the same buffers
  epoch_ = checkpoint.epoch;
  step_ = checkpoint.step;
  shuffle_state_ = checkpoint.shuffle_state;
  standardizer_ = checkpoint.standardizer;
  resumed_ = Resumed{path, checkpoint.setup.at("train_data")};
  train_data_ = resumed_->train_data;
  set_generator_state(checkpoint.generator);
  last_checkpoint_ = WrittenCheckpoint{path, epoch_};
}

}  // namespace tandem::trainers
