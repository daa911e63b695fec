#pragma once
// Trainer: fits a model, a regression or a classifier (TrainerOptions::task), with a data-parallel optimizer (SGD
// unless another is given) on a list of devices or over the processes of a group, minimizing a loss (the mean squared
// error for a regression, cross-entropy for a classifier, unless another is given).
//
//   auto split = trainers::train_test_split(trainers::make_dataset(trainers::read_csv("data.csv")), 0.2);
//   manual_seed(0);
//   trainers::Trainer trainer(trainers::make_mlp(10, 20), {.devices = parse_devices("all"), .epochs = 100});
//   trainer.add_callback(trainers::ProgressPrinter::to_stdout());
//   trainers::FitResult result = trainer.fit(split.train, split.test);
//
// fit() takes a CSV table (TableDataset) or any Dataset (dataset.h) whose targets hold one value per example:
//
//   trainers::TensorDataset train({features, targets});  // float32 [n, ...], float32 or int64 [n]
//   trainers::FitResult result = trainer.fit(train);       // TrainerOptions::num_workers threads load the batches
//
// fit() standardizes features (on by default for tables, off for other data sets: TrainerOptions::
// standardize_features) and, by default, the target with statistics of the training set, then runs
// epochs of shuffled batches (a DataLoader: on GPUs copied asynchronously from pinned memory); each step is
// one parallel::TrainingStep over the devices (parallel/training_step.h), and the steps' losses are read once per epoch
// (Note [Losses read once per epoch] in callback.h), in the epoch's one read together with the parameter check and the
// evaluation. Metrics (and losses, see Loss::units_power) are reported in the target's original units. A checkpoint
// (save_checkpoint / load_checkpoint, checkpoint.h) holds the model's parameters and buffers, the optimizer's state by
// name (SGD's momentum, Adam's moments and step counts, a custom optimizer's state_dict()), the counters, the global
// generator's and the loader's states and the standardization, so a fit resumed from it continues exactly as the
// uninterrupted one would have (an LR schedule too: its position is the epoch, Note [Schedule position]).
//
// Classification (TrainerOptions::task): the target column holds class labels (options.classes, e.g.
// ClassLabels::of(data)); fit() maps them to class indices 0..C-1, which a Loss receives as int64 targets [n, 1],
// leaves them unstandardized, and the model, whose output is one score per class ([n, C]), minimizes the cross-entropy.
// Every epoch reports the accuracy and cross-entropy of the training and test sets (ClassificationMetrics, with their
// confusion matrices).
//
// Under a process group (TrainerOptions::group, docs/distributed.md) every process of the group runs the same code:
// each trains on its shard of every global batch (DistributedSampler) with parallel::DistributedDataParallel, and the
// result equals one process's run on every device of the group (the same steps, within float rounding). Every
// process computes the same global losses and metrics; rank 0 alone runs the callbacks (progress, metrics files),
// except those that run on every rank (Callback::on_every_rank: CheckpointSaver), and writes checkpoints.

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "tandem/comm/process_group.h"
#include "tandem/core/device.h"
#include "tandem/nn/module.h"
#include "tandem/optim/optimizer.h"
#include "tandem/optim/sgd.h"
#include "tandem/parallel/distributed.h"
#include "tandem/parallel/replicated_optimizer.h"
#include "tandem/parallel/sharded_optimizer.h"
#include "tandem/parallel/training_step.h"
#include "tandem/trainers/callback.h"
#include "tandem/trainers/classification.h"
#include "tandem/trainers/loader.h"
#include "tandem/trainers/lr_schedule.h"
#include "tandem/trainers/metrics.h"
#include "tandem/trainers/run_setup.h"
#include "tandem/trainers/standardize.h"
#include "tandem/trainers/table_dataset.h"
#include "tandem/trainers/tensor_dataset.h"

namespace tandem::trainers {
namespace detail {
class PreparedDataset;  // prepared_dataset.h
}

// A training loss: a one-element tensor from a model's output and the targets of the same rows, a mean over the rows.
using LossFunction = parallel::LossFunction;

// The loss fit() minimizes: each replica applies `function` to its chunk of a batch (parallel::TrainingStep).
struct Loss {
  std::string name;       // recorded as the setup fact "loss": a resume must use a loss of the same name
  LossFunction function;  // a mean over the rows
  // Reported losses (StepReport, EpochReport) are function's values times target_scale^units_power, which puts them
  // in the target's original units for a loss that scales so with the target (2: squared errors, 1: absolute
  // errors). 0 reports them as computed, on the standardized target when options.standardize_target.
  int units_power = 0;

  static Loss mse() { return {"mse", nn::mse_loss, 2}; }  // the default for regression
  // The default for classification: class_cross_entropy (classification.h) over the class indices.
  static Loss cross_entropy() { return {"cross_entropy", class_cross_entropy, 0}; }
};

enum class Task {
  Regression,      // one output per row, compared with the (standardized) target
  Classification,  // one score per class, the target holding class labels
};

// An optimizer in place of SGD: `make` builds one over a parameter list, and the Trainer builds one per replica
// (parallel::ReplicatedOptimizer), so it must update from the parameters, their gradients and its own state only.
// Its state_dict() (optim::Optimizer's default wraps state()) is what checkpoints keep for it.
struct CustomOptimizer {
  std::string name;  // recorded as the setup fact "optimizer": a resume must use an optimizer of the same name
  parallel::ReplicatedOptimizer::Factory make;
};

struct TrainerOptions {
  std::vector<Device> devices;  // where the step runs; empty: default_devices(). The model lives on devices[0].
  // The processes that train together, each on group->devices() (then `devices` must be empty or the same list),
  // through parallel::DistributedDataParallel. Null: this process alone on `devices` (parallel::ReplicatedModule,
  // no group needed), which is what a group of one process computes too.
  std::shared_ptr<comm::ProcessGroup> group;
  // The defaults fit the diabetes net (standardized data) to test R^2 0.546..0.549 over seeds 0..7 (OLS: 0.5502).
  int64_t epochs = 100;     // the last epoch of fit() (counting epochs done before a resume)
  int64_t batch_size = 64;  // global: split over every device of every process of the group
  // Gradient accumulation (Note [Accumulating micro-batches] in parallel/training_step.h): each optimizer step takes
  // accumulate_steps batches of batch_size rows (micro-batches), their gradients summed locally (no_sync()), then
  // reduced once and stepped once, each micro-batch's loss weighted by its share of the rows of the whole accumulated
  // batch: the step equals one step on a batch accumulate_steps times larger (to float rounding). An epoch whose
  // batch count is not a multiple of accumulate_steps ends with a step on the batches left. step(), the LR schedule,
  // StepReport and the losses count optimizer steps. Steps of several micro-batches run eagerly, since a captured
  // step starts from zeroed gradients (FitResult::eager_reason says so). Recorded as the setup fact
  // "accumulate_steps" when not 1.
  int64_t accumulate_steps = 1;
  // ZeRO (DistributedOptions::zero_stage of the group's DistributedDataParallel, docs/distributed.md): 0 replicates
  // the optimizer state on every device; 1 shards it over every device of every process (parallel::ShardedSGD, or a
  // parallel::ShardedOptimizer over the custom optimizer's factory, whose update must be elementwise: SGD, Adam,
  // AdamW), with the same results to float rounding; 2 also shards the reduced gradients (Note [Staged gradient
  // buckets] in tandem/parallel/gradient_reducer.h; its steps are not captured). Stages 1 and 2 need a group (a group
  // of one included). Not a setup fact: checkpoints hold the state per parameter, so a run resumes at any stage and
  // world size (Note [Checkpoints at any world size] in trainer_checkpoint.cpp). Errors: a stage other than 0, 1 or
  // 2.
  int zero_stage = 0;
  optim::SGDOptions sgd{.lr = 0.01, .momentum = 0.9};  // the optimizer, unless `optimizer` is set
  std::optional<CustomOptimizer> optimizer;            // another optimizer; `sgd` is then unused
  Loss loss = Loss::mse();                             // what fit() minimizes
  // Classification: `classes` (at least 2) are the labels the target column holds; a `loss` left at the default
  // (named "mse") becomes Loss::cross_entropy(), and standardize_target becomes false (class indices are not
  // standardized). Regression: `classes` must be empty.
  Task task = Task::Regression;
  ClassLabels classes;
  // The learning rate per epoch (lr_schedule.h); none: the optimizer's lr throughout. Its optimizer must have
  // learning rates (SGD, Adam, AdamW do).
  std::optional<LrSchedule> lr_schedule;
  // How the model's layers multiply (Note [Precision modes] in tandem/core/precision.h): set on the model
  // (nn::Module::set_precision) before it is replicated. Recorded as the setup fact "precision" when it is not
  // Precision::Float32, so that checkpoints of float32 runs keep their facts. None: the model keeps its own.
  std::optional<Precision> precision;
  // Let the training step capture (parallel::TrainingStep's captured strategy), each step one CUDA graph replayed (Note
  // [Captured training steps] in trainer.cpp): on CUDA devices within one process (a group of one included). Elsewhere,
  // for a step that cannot be captured (random draws made on the host, such as randn), or when false, the steps run
  // eagerly, and FitResult::eager_reason says why. The results equal the eager steps' to float rounding (exactly on CPU
  // devices, which never capture); not a setup fact: a checkpoint resumes with either.
  bool capture = true;
  // Before fit's clock, take the step of every batch shape on a throwaway copy of the model, and one epoch's end
  // read, so that the first epoch does not pay for loading kernels, choosing matrix plans, growing the allocator and
  // setting up graph capture (Note [Warming the step up on a copy] in trainer.cpp; FitResult::setup_seconds). The
  // results are the same either way, exactly; false saves the set-up time where the first epoch's cost does not
  // matter (or the copy's memory: one copy of the model per device while it runs). Not a setup fact.
  bool warm_up = true;
  uint64_t shuffle_seed = 0;  // the loader's shuffle order
  // Threads reading the training batches ahead of the steps (DataLoaderOptions::num_workers): the batches, and so
  // the results, are the same for any number. Not a setup fact.
  int num_workers = 0;
  // Applied to the training batches, after the standardization (DataLoaderOptions::transform: per example, keyed by
  // seed, epoch and example index, so the same for any number of workers, devices and processes), e.g. an
  // ImageTransforms' random crops (a resumed fit draws those of its own epochs); never to the evaluations. Null: none.
  // Not a setup fact: record it in `setup`.
  std::shared_ptr<const BatchTransform> transform;
  // Applied to the features of every evaluation (the training and test sets' metrics, evaluate() and predict()), after
  // the standardization, as torchvision's test-time transform: e.g. an ImageTransforms with only the normalization
  // of `transform` (its mean and std, no crops or flips), so that the model sees the images it trained on normalized
  // alike. Called with epoch 0 and each row's index in its set. Null: none. Not a setup fact: record it in `setup`.
  std::shared_ptr<const BatchTransform> eval_transform;
  bool standardize_target = true;  // train on a standardized target (metrics stay in original units)
  // Standardize each feature with the training set's mean and deviation (off: the features as they are, e.g. pixels
  // already in [0, 1]). None: on for a table (fit over TableDatasets), off for any other Dataset. Recorded as the
  // setup fact "standardize_features" when set to false.
  std::optional<bool> standardize_features;
  // Facts of the run that the Trainer cannot see (a data file, column choices, an activation), recorded in
  // checkpoints beside its own (see Trainer::setup()); a resume must match them all.
  SetupFacts setup;
  // Facts a resume may change: only "lr" and "epochs" (continue longer, or at another learning rate).
  std::set<std::string> resume_may_change;
};

class Trainer {
 public:
  // Moves the model to options.devices[0], replicates it onto the other devices (replicas kept for every step, see
  // parallel::ReplicatedModule; with a group, within a parallel::DistributedDataParallel, which gives every process
  // rank 0's parameters) and builds the optimizer. Collective under a group of several processes: every process
  // constructs its Trainer with a model of the same structure and the same options. Throws Error for bad options
  // (epochs < 1, batch_size < 1, accumulate_steps < 1, duplicate or unavailable devices, devices that are not the
  // group's, a model without parameters, a loss or custom optimizer without a name or a function, units_power < 0,
  // classes that do not fit the task, an lr_schedule without a name or a function).
  Trainer(std::shared_ptr<nn::Module> model, TrainerOptions options);

  // Callbacks run on rank 0 of the group only (always without a group), so progress, metrics files and
  // checkpoints come from one process; what they see (losses, metrics, counters) is the same on every process. One
  // whose on_every_rank() is true runs on every process (CheckpointSaver: a save may be collective).
  void add_callback(std::shared_ptr<Callback> callback);

  // Trains from the current epoch (0, or the checkpoint's) up to options.epochs and evaluates. `test` may be
  // empty (no rows). Collective under a group: every process calls it with the same data sets (each evaluates the
  // whole test set itself, so every process reports the same metrics). Note [Setups compared across processes]:
  // before anything trains, the processes compare their setups (setup(), fingerprints of both data sets, and of the
  // state they start from: counters, parameters and optimizer state, which differ after resuming from different
  // checkpoints), and every process throws SetupMismatch naming the first difference when any differs (so no
  // process trains, and no mismatched collective follows). Throws Error when the loss becomes NaN or
  // infinite (naming the epoch and the first bad step; the global loss, so on every process at once) before any
  // callback sees that epoch's end, so the last checkpoint written stays the last good one. The losses are checked
  // at the epoch's end (after every step, when a callback needs_step_loss()), so step() then counts the epoch's
  // later steps too.
  FitResult fit(const TableDataset& train, const TableDataset& test = {});
  // The same over any data set (dataset.h), read through a DataLoader every epoch: each example's data is the model's
  // input as it is (any shape and dtype: an image [C, H, W], token ids), or standardized element by element when
  // options.standardize_features is true (off by default here), and its target one value: a regression's target
  // (standardized with options.standardize_target), or a classifier's label, one of options.classes. Metrics,
  // checkpoints, resumes and the setup comparison as for tables (the data's fingerprint reads every example once per
  // fit). Errors: as above; no training examples; a target of more than one value; a label that is not one of the
  // classes; examples of different sizes when standardizing.
  FitResult fit(const Dataset& train);
  FitResult fit(const Dataset& train, const Dataset& test);

  // Predictions for `data` in the target's original units (needs the standardization: after fit or a checkpoint);
  // a classifier's are the labels (ClassLabels::labels) of the highest-scoring classes.
  // Both run the model in eval mode and give every module its previous mode back afterwards (also on an error), so
  // fit()'s training steps run in the mode the model had (training, unless the caller changed it).
  std::vector<double> predict(const TableDataset& data) const;
  RegressionMetrics evaluate(const TableDataset& data) const;  // regression only
  // A classifier's metrics on `data`, whose targets are labels of options.classes. Errors: a regression Trainer; a
  // target that is not one of the labels (naming the row); a model whose output is not [rows, classes].
  ClassificationMetrics evaluate_classes(const TableDataset& data) const;

  // Rank 0 of the group writes the checkpoint (atomically); the other processes, whose state is the same, write
  // nothing. Collective under a group at zero_stage 1 or 2, whose state it gathers from the shards one bucket slot at a
  // time as rank 0 writes it (Note [Checkpoints at any world size] in trainer_checkpoint.cpp): every process calls it,
  // as CheckpointSaver does.
  void save_checkpoint(const std::string& path) const;
  // Restores a checkpoint written by save_checkpoint; fit() then continues. Collective under a group: every process
  // reads the file (on a file system they share) and rank 0's parameters are then broadcast to every process. All or
  // nothing: the file's metadata, every parameter, buffer and optimizer state tensor (names, shapes, dtypes, finite
  // values), the optimizer state's fit (its load_state_dict) and the setup are checked before anything is changed.
  // Reads checkpoint versions 4 and 3 (checkpoint.h); a version 3 file, which keeps no buffers, is refused for a
  // model with buffers. A checkpoint of another setup (model, loss, optimizer, batch size, shuffle seed, epochs,
  // options.setup) is refused with the list of differences, except for the facts in options.resume_may_change; the
  // training data is compared at the start of fit().
  void load_checkpoint(const std::string& path);
  // The facts recorded in checkpoints: options.setup, plus "model", "loss" (its name), "optimizer" ("sgd" or the
  // custom optimizer's name), for SGD "lr", "momentum", "weight_decay", "dampening" and "nesterov", then
  // "batch_size", "accumulate_steps" (when not 1), "shuffle_seed", "standardize_target", "epochs", with a schedule
  // "lr_schedule" (its name), for classification "task" ("classification") and "classes" (ClassLabels::str(): the label
  // of each class index), and "train_data" (a fingerprint of the training set) once fit() has seen it.
  SetupFacts setup() const;

  const std::shared_ptr<nn::Module>& model() const { return model_; }  // the master, on devices[0]
  // The replicated optimizer. Errors: zero_stage 1 or 2 (sharded_optimizer()).
  const parallel::ReplicatedOptimizer& optimizer() const;
  const parallel::ShardedOptimizer* sharded_optimizer() const { return sharded_.get(); }  // null at zero_stage 0
  // The bytes of optimizer state each device holds (the most over this process's devices): at zero_stage 0 the whole
  // replicated state, at 1 and 2 its device's shards' (parallel::optimizer_state_bytes). 0 before the first step.
  size_t optimizer_state_bytes_per_device() const;
  // The bytes of gradient buffers each device holds between steps (the most over this process's devices): the whole
  // flat buffer at zero_stage 0 and 1, the device's shard of it at 2.
  size_t gradient_bytes_per_device() const;
  // The step every batch of fit() goes through (Note [Captured training steps] in trainer.cpp): its strategy,
  // graphs, captures and the last step's fallback reason.
  const parallel::TrainingStep& training_step() const { return *training_step_; }
  const TrainerOptions& options() const { return options_; }                           // with the devices filled in
  const std::shared_ptr<comm::ProcessGroup>& group() const { return options_.group; }  // null without one
  bool primary() const { return !options_.group || options_.group->rank() == 0; }      // rank 0: runs the callbacks
  int64_t epoch() const { return epoch_; }                                             // epochs completed
  int64_t step() const { return step_; }                                               // optimizer steps completed
  const std::optional<Standardizer>& standardizer() const { return standardizer_; }

 private:
  // How the steps of a fit ran, for FitResult::captured_steps and eager_reason.
  struct StepModes {
    int64_t captured = 0;
    std::string eager_reason;    // of the last eager step after the capture's warm-up
    std::string warm_up_reason;  // of the last warm-up step
  };
  // One epoch's steps' losses: on the device until the epoch's end (Note [Losses read once per epoch]), or read.
  struct EpochLosses {
    Tensor on_device;           // [batches] local losses on devices[0]; undefined when read after every step
    std::vector<float> read;    // the global losses, when read after every step (then already checked)
    std::vector<int64_t> rows;  // each step's global rows (of all its micro-batches)
    int64_t epoch = 0;          // 1-based
    int64_t batches = 0;        // optimizer steps
    int64_t first_step = 0;     // steps completed before this epoch
  };
  // A data set the epochs evaluate: its standardized features resident on devices[0] (Note [One read per epoch] in
  // trainer_evaluation.cpp) and the targets its metrics compare with (a classifier's class indices).
  struct EvaluationSet {
    std::vector<Tensor> features;  // batches of kPredictBatch rows
    std::vector<double> targets;
  };
  // What read_epoch_end brings back; empty where not asked for.
  struct EpochValues {
    std::vector<float> losses;                       // the global losses of EpochLosses::on_device
    std::vector<float> parameter_sums;               // per parameter of the master, in named_parameters() order
    std::vector<float> train_outputs, test_outputs;  // the model's outputs, row-major
  };
  // One epoch of steps, their losses left on the device unless read_each_step (then each read and checked after its
  // step, Note [Losses read once per epoch]).
  EpochLosses train_epoch(DataLoader& loader, bool read_each_step, StepModes& modes);
  // What every fit checks first: the epochs left, the training data against a resumed checkpoint's, and under a
  // group the setups of every process (Note [Setups compared across processes]), given the data's fingerprints.
  void check_fit_start(const std::string& train_data, const std::string& test_data);
  FitResult fit_examples(const Dataset& train, const Dataset* test);  // fit over any Dataset; test may be null
  // The fit itself, on training rows that are the model's inputs and the loss's targets, and the evaluation sets.
  FitResult fit_prepared(const Dataset& rows, const EvaluationSet& train_eval,
                         const std::optional<EvaluationSet>& test_eval,
                         std::chrono::steady_clock::time_point setup_begin);
  // One optimizer step on the micro-batches (training_step_: every one but the last accumulated, Note [Accumulating
  // micro-batches]), counted in `modes`. Returns the step's (local) loss, the accumulated batch's mean; with a
  // defined `loss_slot` (one float32 element on the first device) the loss is written there, on the device, and
  // loss_slot is returned.
  Tensor train_step_on(const std::vector<Batch>& micro_batches, StepModes& modes, const Tensor& loss_slot = Tensor());
  // Issues on devices[0] what an epoch's end needs (the global sums of `losses` when defined, the parameters' sums
  // when `parameters`, the outputs for the sets given) and reads it all with one host wait (Note [One read per
  // epoch] in trainer.cpp).
  EpochValues read_epoch_end(const Tensor& losses, bool parameters, const EvaluationSet* train,
                             const EvaluationSet* test) const;
  // The epoch's mean loss, weighted by batch rows (EpochReport::train_loss), from its global losses; checks each one
  // first when they were read at the epoch's end.
  double epoch_loss(const std::vector<float>& global_losses, const EpochLosses& losses) const;
  double loss_to_original() const;  // target_scale^units_power (Loss::units_power)
  // Throws the Error of a non-finite loss of step `batch` (0-based) of the epoch.
  void check_loss(double loss, const EpochLosses& losses, size_t batch) const;
  bool reads_each_step_loss() const;  // whether a callback needs_step_loss(), agreed on by every process
  // Steps of every batch shape on a throwaway copy of the model (Note [Warming the step up on a copy]); they may
  // draw from the global generator, which the caller restores.
  void warm_up_step(const DataLoader& loader) const;
  bool classifier() const { return options_.task == Task::Classification; }
  int64_t output_width() const;  // the model's outputs per row: 1, or a classifier's classes
  SetupFacts facts_of_this_fit(const std::string& test_data) const;  // the test set's fingerprint
  // `data`'s standardized (and eval_transform'ed) features on devices[0], in batches of kPredictBatch rows (none
  // without rows).
  std::vector<Tensor> resident_features(const TableDataset& data) const;
  // Rows first, first + 1, ... of an evaluated set through TrainerOptions::eval_transform (if any), on devices[0].
  Tensor for_evaluation(const Tensor& features, int64_t first) const;
  // A prepared data set's data on devices[0] in batches of kPredictBatch examples, and its targets for the metrics.
  EvaluationSet evaluation_set(const detail::PreparedDataset& data) const;
  // The model's outputs for the batches, row-major on devices[0], each checked to be `width` per row (an Error
  // naming `who`); eval mode, no gradients, nothing read.
  Tensor model_outputs(const std::vector<Tensor>& features, int64_t width, const char* who) const;
  // The model's outputs for `data` (not yet standardized), read.
  std::vector<float> read_outputs(const TableDataset& data, const char* who) const;
  RegressionMetrics regression_metrics_of(const std::vector<float>& outputs, const std::vector<double>& targets) const;
  ClassificationMetrics class_metrics(const std::vector<float>& scores, const std::vector<double>& class_indices) const;
  Tensor global_sum(const Tensor& local) const;  // local's values summed over the group's processes (on the device)
  template <class Event>
  // Runs event(callback) for every callback on rank 0, and for those that ask for it (on_every_rank) on every rank.
  void notify(const Event& event) const;
  void check_same_training_data(const std::string& train_data);  // the training set's fingerprint
  // Throws unless every parameter's sum (read_epoch_end) is finite, naming the first parameter that is not.
  void check_parameters_finite(const std::vector<float>& sums) const;
  std::string stopped_note() const;  // how a stopped fit left its checkpoints

  TrainerOptions options_;
  std::shared_ptr<nn::Module> model_;
  // One of the two holds the replicas, held by pointer: optimizer_ refers to them.
  std::unique_ptr<parallel::DistributedDataParallel> distributed_;  // with a group
  std::unique_ptr<parallel::ReplicatedModule> replicas_;            // without
  std::unique_ptr<parallel::ReplicatedOptimizer> optimizer_;        // at zero_stage 0
  std::unique_ptr<parallel::ShardedOptimizer> sharded_;             // at zero_stage 1 and 2
  std::vector<std::unique_ptr<optim::LRScheduler>> schedules_;      // options.lr_schedule over each replica's optimizer
  std::unique_ptr<parallel::TrainingStep> training_step_;           // every step (Note [Captured training steps])
  std::string capture_blocker_;                                     // why no step can be captured; "" when they may be
  std::vector<std::shared_ptr<Callback>> callbacks_;
  std::optional<Standardizer> standardizer_;
  int64_t epoch_ = 0;
  int64_t step_ = 0;
  uint64_t shuffle_state_ = 0;             // the loader's state before the next epoch
  std::optional<std::string> train_data_;  // fingerprint(train) of the last fit, or of the checkpoint resumed from
  struct Resumed {
    std::string path;
    std::string train_data;
  };
  std::optional<Resumed> resumed_;  // the checkpoint loaded last, whose training data fit() must see again
  struct WrittenCheckpoint {
    std::string path;
    int64_t epoch;
  };
  // The last checkpoint written or loaded, named in the message of a non-finite loss.
  mutable std::optional<WrittenCheckpoint> last_checkpoint_;
};

}  // namespace tandem::trainers
