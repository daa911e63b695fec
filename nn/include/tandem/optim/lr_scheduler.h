#pragma once
// Learning-rate schedules over an optim::Optimizer, as torch.optim.lr_scheduler's, each computed from its closed
// form (the formula PyTorch's documentation gives) rather than by updating the previous lr, so that a schedule
// never drifts and can jump to any epoch (set_last_epoch, for resuming a run).
//
// A scheduler starts every group from its initial lr (Optimizer::initial_lrs(): the lrs when the first scheduler was
// built over the optimizer, PyTorch's "initial_lr"), sets epoch 0's lrs when it is built and the next epoch's at each
// step(). Schedules that follow one another are chained with SequentialLR, as in PyTorch:
//
//   optim::AdamW adamw(net->parameters(), {.lr = 1e-3});
//   optim::LinearLR warmup(adamw, /*start_factor=*/0.1, /*end_factor=*/1.0, /*total_iters=*/5);
//   optim::CosineAnnealingLR cosine(adamw, /*t_max=*/95);
//   optim::SequentialLR schedule(adamw, {&warmup, &cosine}, /*milestones=*/{5});
//   for (int epoch = 0; epoch < 100; ++epoch) { train_one_epoch(adamw); schedule.step(); }

#include <cstdint>
#include <functional>
#include <vector>

#include "tandem/optim/optimizer.h"

namespace tandem::optim {

class LRScheduler {
 public:
  // The lr at `epoch` (>= 0) of a group whose schedule starts from base_lr.
  using Schedule = std::function<double(int64_t epoch, double base_lr)>;

  // A scheduler over `optimizer` (which must outlive it) that follows `schedule`: a custom schedule, as PyTorch's
  // LambdaLR with base_lr * lambda(epoch). Sets epoch 0's lrs. Errors start with `who`: an empty schedule; a
  // schedule value < 0 (or NaN), here or at a later step (which then leaves the epoch and every lr as they were);
  // an optimizer without learning rates.
  LRScheduler(Optimizer& optimizer, Schedule schedule, const char* who = "optim::LRScheduler");
  virtual ~LRScheduler() = default;
  LRScheduler(const LRScheduler&) = delete;
  LRScheduler& operator=(const LRScheduler&) = delete;

  // Moves to the next epoch and sets every group's lr to its schedule's value there.
  void step();
  // The epoch whose lrs are set: 0 after construction, then one more per step() (PyTorch's last_epoch).
  int64_t last_epoch() const { return last_epoch_; }
  // Moves to `epoch` (>= 0) and sets its lrs: to resume a run where it stopped.
  void set_last_epoch(int64_t epoch);
  // The lrs set last, one per group (PyTorch's get_last_lr()).
  const std::vector<double>& last_lr() const { return last_lr_; }
  // The schedule's closed form, for any epoch >= 0 and base lr.
  double lr_at(int64_t epoch, double base_lr) const { return schedule_(epoch, base_lr); }
  Optimizer& optimizer() const { return optimizer_; }
  const Schedule& schedule() const { return schedule_; }

 private:
  void apply();

  const char* who_;
  Optimizer& optimizer_;
  Schedule schedule_;
  std::vector<double> base_lrs_;
  int64_t last_epoch_ = 0;
  std::vector<double> last_lr_;
};

// base_lr * gamma^floor(epoch / step_size). Errors: step_size < 1, gamma < 0 (or NaN).
class StepLR : public LRScheduler {
 public:
  StepLR(Optimizer& optimizer, int64_t step_size, double gamma = 0.1);
};

// eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / t_max)) / 2 (periodic past t_max, as PyTorch's).
// Errors: t_max < 1, eta_min < 0 (or NaN).
class CosineAnnealingLR : public LRScheduler {
 public:
  CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min = 0.0);
};

// base_lr * (start_factor + (end_factor - start_factor) * min(epoch, total_iters) / total_iters): a linear warm-up
// (or decay) over total_iters epochs, then constant. Errors as PyTorch's: start_factor not in (0, 1], end_factor
// not in [0, 1], total_iters < 1.
class LinearLR : public LRScheduler {
 public:
  LinearLR(Optimizer& optimizer, double start_factor = 1.0 / 3.0, double end_factor = 1.0, int64_t total_iters = 5);
};

// schedulers[0] until milestones[0], then schedulers[1] counted from 0 at milestones[0], and so on (PyTorch's
// SequentialLR): at epoch e, the last scheduler i whose milestone m[i-1] <= e gives its lr at e - m[i-1]. The
// schedules are copied: the schedulers passed need not outlive this one, and their own step() is not called.
// Errors: no schedulers, a null one, one over another optimizer; milestones not exactly one fewer than the
// schedulers, not strictly increasing, or not > 0.
class SequentialLR : public LRScheduler {
 public:
  SequentialLR(Optimizer& optimizer, const std::vector<const LRScheduler*>& schedulers,
               std::vector<int64_t> milestones);
};

}  // namespace tandem::optim
