#pragma once
// The callback interface: what a Trainer reports while it runs (StepReport, EpochReport, FitResult) and the
// Callback that receives it. The ready-made listeners (progress, metrics files, plots, checkpoints) are in
// callbacks.h. Metrics are in the target's original units (the Trainer undoes the target standardization before
// reporting), and so are losses as far as Loss::units_power says how (the default MSE's does).

#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "tandem/trainers/classification.h"
#include "tandem/trainers/metrics.h"

namespace tandem::trainers {

class Trainer;

// Note [Losses read once per epoch]: reading a step's loss on the host waits for the step to finish on the devices
// (and under a group of several processes adds an all-reduce per step), which keeps the host from queueing the next
// steps while the GPUs work. So the Trainer keeps each step's loss on the first device and reads the epoch's losses
// once, at its end, where it checks them (a NaN or infinity names its epoch and step) before any callback sees the
// epoch. A callback that wants every step's loss in StepReport::loss asks for it with needs_step_loss(), and pays for
// that host wait (and all-reduce) after every step; one that shows a loss now and then (a progress bar) calls
// StepReport::read_loss instead, which waits for that one step.
struct StepReport {
  int64_t epoch = 0;        // 1-based
  int64_t epochs = 0;       // the last epoch of this fit
  int64_t batch = 0;        // 1-based within the epoch (an optimizer step: accumulate_steps batches, TrainerOptions)
  int64_t num_batches = 0;  // per epoch (its optimizer steps)
  int64_t step = 0;         // optimizer steps completed, over all epochs
  // This batch's loss (the MSE by default) when some callback of the Trainer needs_step_loss(), read after every
  // step; NaN otherwise (Note [Losses read once per epoch]).
  double loss = NAN;
  // This batch's loss read now: `loss` when it was read, otherwise a host wait for this step. Empty (nullopt) when the
  // loss was not read and the Trainer runs under a group of several processes, where the global loss needs every
  // process. Valid during on_step_end only.
  std::function<std::optional<double>()> read_loss;
};

struct EpochReport {
  int64_t epoch = 0;
  int64_t epochs = 0;
  int64_t step = 0;
  double train_loss = 0.0;                // mean of the epoch's batch losses, weighted by batch rows
  std::optional<RegressionMetrics> test;  // regression, when the Trainer was given a test set
  // Classification: the training set's and (when given) the test set's metrics after the epoch, in eval mode.
  std::optional<ClassificationMetrics> train_classes;
  std::optional<ClassificationMetrics> test_classes;
  double seconds = 0.0;  // wall time of the epoch (training and evaluation)
};

struct FitResult {
  RegressionMetrics train;  // regression: on the whole training set after the last epoch
  std::optional<RegressionMetrics> test;
  std::optional<ClassificationMetrics> train_classes;  // classification: the same metrics of a classifier
  std::optional<ClassificationMetrics> test_classes;
  int64_t epochs = 0;  // epochs completed, counting those before a resume
  int64_t steps = 0;
  // Wall time of this fit's epochs and final evaluation: from the start of its first epoch, after the set-up that
  // standardizes the data and creates what the first step would otherwise create (Note [Set-up before the clock] in
  // trainers/src/trainer.cpp).
  double seconds = 0.0;
  // Wall time of this fit's set-up before that clock started (Note [Set-up before the clock]): the standardization,
  // the loader's start, the devices' warm-up, the evaluation sets' upload and, with TrainerOptions::warm_up, the
  // throwaway steps and the first epoch's end read.
  double setup_seconds = 0.0;
  // How this fit's training steps ran (TrainerOptions::capture, Note [Captured training steps] in
  // trainers/src/trainer.cpp): the steps that replayed a CUDA graph, and why steps ran eagerly: "" when every step
  // after the capture's eager warm-up replayed one; otherwise the reason of the last eager step after the warm-up (of
  // the last warm-up step when none replayed), e.g. "capture needs CUDA devices, but the model runs on cpu:0".
  int64_t captured_steps = 0;
  std::string eager_reason;
  bool steps_captured() const { return eager_reason.empty(); }
};

class Callback {
 public:
  virtual ~Callback() = default;
  // Whether on_step_end needs StepReport::loss after every step, at the cost of a host wait per step (Note [Losses
  // read once per epoch]). Asked once per fit, on rank 0.
  virtual bool needs_step_loss() const { return false; }
  // Whether the callback runs on every process of a group instead of on rank 0 alone: one that calls a collective,
  // as CheckpointSaver does (Trainer::save_checkpoint). Its events carry the same reports on every process.
  virtual bool on_every_rank() const { return false; }
  virtual void on_fit_begin(const Trainer& /*trainer*/) {}
  virtual void on_step_end(const Trainer& /*trainer*/, const StepReport& /*report*/) {}
  // Runs after the epoch's parameters were checked to be finite.
  virtual void on_epoch_end(const Trainer& /*trainer*/, const EpochReport& /*report*/) {}
  virtual void on_fit_end(const Trainer& /*trainer*/, const FitResult& /*result*/) {}
};

}  // namespace tandem::trainers
