#pragma once
// The ready-made listeners of a Trainer (callback.h has the interface): progress output, metrics files, plots and
// periodic checkpoints.

#include <chrono>
#include <cmath>
#include <cstdint>
#include <functional>
#include <iosfwd>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tandem/trainers/callback.h"

namespace tandem::trainers {

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

// A file of JSON lines, each an object with a non-negative integer counter under `key` ("epoch", "step"), written as
// Note [Paced file writes] says; the mechanics of MetricsLogger and of tandem-train's language-model metrics. Messages
// start with `owner`. Throws Error when the path cannot be written (checked at construction, see check_writable).
class JsonLinesFile {
 public:
  JsonLinesFile(std::string path, std::string key, std::string owner,
                std::chrono::milliseconds sync_interval = kDefaultFileSyncInterval);
  ~JsonLinesFile();
  JsonLinesFile(const JsonLinesFile&) = delete;
  JsonLinesFile& operator=(const JsonLinesFile&) = delete;
  // Rewrites the file atomically with the lines held so far (with `resume`, first read from the existing file, if
  // any, dropping a last line without its newline) whose counter is at most `keep_up_to`, then opens it for
  // appending. Errors: an existing file that is not such JSON lines (naming the line).
  void begin(bool resume, int64_t keep_up_to);
  // Appends `line` (whose counter is `counter`) in one write; fsyncs when `last` or when sync_interval has passed.
  void append(int64_t counter, const std::string& line, bool last);
  // Fsyncs and closes the file.
  void end();

 private:
  struct Line {
    int64_t counter;
    std::string json;
  };
  std::vector<Line> read_lines() const;
  void write_lines() const;
  void sync();
  void close_file() noexcept;

  std::string path_;
  std::string key_;
  std::string owner_;
  std::chrono::milliseconds sync_interval_;
  std::vector<Line> lines_;  // the file's contents, in order
  int fd_ = -1;              // the file, open for appending, between begin and end
  std::chrono::steady_clock::time_point last_sync_;
};

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
  void on_fit_begin(const Trainer& trainer) override;
  void on_epoch_end(const Trainer& trainer, const EpochReport& report) override;
  void on_fit_end(const Trainer& trainer, const FitResult& result) override;

 private:
  JsonLinesFile file_;
  bool append_;
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
  bool on_every_rank() const override { return true; }  // a save is collective at zero_stage 1 and 2
  void on_epoch_end(const Trainer& trainer, const EpochReport& report) override;

 private:
  std::string path_;
  int64_t every_;
};

}  // namespace tandem::trainers
