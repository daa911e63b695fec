#pragma once
// Callbacks: what a Trainer reports while it runs, and the ready-made listeners for progress output, metrics files
// and periodic checkpoints. Metrics are in the target's original units (the Trainer undoes the target
// standardization before reporting), and so are losses as far as Loss::units_power says how (the default MSE's does).

#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

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
  int64_t batch = 0;        // 1-based within the epoch
  int64_t num_batches = 0;  // per epoch
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
  // the loader's staging, the devices' warm-up, the evaluation sets' upload and, with TrainerOptions::warm_up, the
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
  virtual void on_fit_begin(const Trainer& /*trainer*/) {}
  virtual void on_step_end(const Trainer& /*trainer*/, const StepReport& /*report*/) {}
  // Runs after the epoch's parameters were checked to be finite.
  virtual void on_epoch_end(const Trainer& /*trainer*/, const EpochReport& /*report*/) {}
  virtual void on_fit_end(const Trainer& /*trainer*/, const FitResult& /*result*/) {}
};

// Per-epoch progress. With `bar` (meant for a terminal) a bar is redrawn in place during each epoch, at most ten
// times a second, with the loss of the step it was drawn at (StepReport::read_loss: one host wait per redraw, none
// per step; no loss under a group of several processes). Either way each epoch ends with one line,
//   "epoch  12/150  train_loss 2931.4  test_mse 2950.1  test_r2 0.5423  3.1 ms", for a classifier
//   "epoch  12/150  train_loss 0.0412  train_acc 0.9986  test_loss 0.2301  test_acc 0.9415  3.1 ms".
class ProgressPrinter : public Callback {
 public:
  ProgressPrinter(std::ostream& out, bool bar);
  // Writes to std::cout, with a bar when standard output is a terminal.
  static std::shared_ptr<ProgressPrinter> to_stdout();

  void on_step_end(const Trainer& trainer, const StepReport& report) override;
  void on_epoch_end(const Trainer& trainer, const EpochReport& report) override;

 private:
  std::ostream& out_;
  bool bar_;
  std::chrono::steady_clock::time_point last_draw_;
};

// Note [Paced file writes]: a run of many short epochs must not spend its time rewriting its own logs (rewriting and
// fsyncing the whole file every epoch costs the square of the epochs). So:
//  - MetricsLogger rewrites its file atomically once, at the start of each fit, and then appends one line per epoch
//    (a single write of the whole line), fsyncing at most every `sync_interval` and at the last epoch. A process that
//    dies loses nothing (the lines are in the page cache); a machine that loses power loses at most the lines of the
//    last interval, and a line torn by it is the file's last, without its newline, which the resume drops.
//  - PlotWriter rewrites its image atomically at most every `interval`, at the last epoch and at the end of fit (and,
//    best effort, when it is destroyed): the image is a view of the run, redrawn from the epochs of the run.
inline constexpr std::chrono::milliseconds kDefaultFileSyncInterval{2000};

// Keeps one JSON object per epoch in a file ("JSON lines"):
//   {"epoch":3,"epochs":150,"step":36,"train_loss":3011.2,"test_mse":2950.1,"test_r2":0.54,"seconds":0.003}
// (a classifier's lines hold train_accuracy, test_loss and test_accuracy in place of test_mse and test_r2)
// Written as Note [Paced file writes] says: atomically at the start of each fit, then appended. The file starts empty
// unless `append` (a resumed run): then on_fit_begin reads the existing file, if any, and keeps its lines whose
// "epoch" is at most the trainer's epoch, so that the epochs after the checkpoint, which the resumed run repeats, are
// listed once. Throws Error when the path cannot be written (checked at construction, see check_writable) and, from
// on_fit_begin, when the existing file is not JSON lines with an "epoch" each (naming the line).
class MetricsLogger : public Callback {
 public:
  explicit MetricsLogger(const std::string& path, bool append = false,
                         std::chrono::milliseconds sync_interval = kDefaultFileSyncInterval);
  ~MetricsLogger() override;
  MetricsLogger(const MetricsLogger&) = delete;
  MetricsLogger& operator=(const MetricsLogger&) = delete;
  void on_fit_begin(const Trainer& trainer) override;
  void on_epoch_end(const Trainer& trainer, const EpochReport& report) override;
  void on_fit_end(const Trainer& trainer, const FitResult& result) override;

 private:
  struct Line {
    int64_t epoch;
    std::string json;
  };
  static std::vector<Line> read_lines(const std::string& path);
  void write_lines() const;
  void sync();
  void close_file() noexcept;

  std::string path_;
  bool append_;
  std::chrono::milliseconds sync_interval_;
  std::vector<Line> lines_;  // the file's contents, in order
  int fd_ = -1;              // the file, open for appending, between on_fit_begin and on_fit_end
  std::chrono::steady_clock::time_point last_sync_;
};

// Draws the run as an SVG image (svg_chart.h), rewritten atomically (write_file_atomically) as Note [Paced file
// writes] says: the loss per epoch on a log scale (train: the epoch's mean batch loss; test: the test set's, when
// there is one) beside the metric (a classifier's train and test accuracy; a regression's test R^2). A resumed run
// draws the epochs it runs. Throws Error when the path cannot be written (checked at construction, see
// check_writable).
class PlotWriter : public Callback {
 public:
  explicit PlotWriter(std::string path, std::chrono::milliseconds interval = kDefaultFileSyncInterval);
  ~PlotWriter() override;
  PlotWriter(const PlotWriter&) = delete;
  PlotWriter& operator=(const PlotWriter&) = delete;
  void on_epoch_end(const Trainer& trainer, const EpochReport& report) override;
  void on_fit_end(const Trainer& trainer, const FitResult& result) override;

 private:
  void draw();

  std::string path_;
  std::chrono::milliseconds interval_;
  std::chrono::steady_clock::time_point last_draw_;
  bool drawn_once_ = false;
  bool pending_ = false;  // epochs not drawn yet
  bool classifier_ = false;
  bool has_test_ = false;
  std::string loss_name_;
  std::vector<double> epochs_, train_loss_, test_loss_, train_metric_, test_metric_;
};

// Writes a checkpoint (Trainer::save_checkpoint) after every `every`-th epoch and after the last one. Throws Error
// for every < 1 and for a path that cannot be written (see check_writable), before any training time is spent.
class CheckpointSaver : public Callback {
 public:
  CheckpointSaver(std::string path, int64_t every = 1);
  void on_epoch_end(const Trainer& trainer, const EpochReport& report) override;

 private:
  std::string path_;
  int64_t every_;
};

}  // namespace tandem::trainers
