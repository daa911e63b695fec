#include "tandem/optim/lr_scheduler.h"

#include <algorithm>
#include <cmath>
#include <numbers>

#include "tandem/core/error.h"

namespace tandem::optim {
namespace {

LRScheduler::Schedule step_schedule(int64_t step_size, double gamma) {
  TANDEM_CHECK(step_size >= 1, "optim::StepLR: step_size must be >= 1, got ", step_size);
  TANDEM_CHECK(gamma >= 0.0, "optim::StepLR: gamma must be >= 0, got ", gamma);
  return [step_size, gamma](int64_t epoch, double base_lr) {
    return base_lr * std::pow(gamma, static_cast<double>(epoch / step_size));
  };
}

LRScheduler::Schedule cosine_schedule(int64_t t_max, double eta_min) {
  TANDEM_CHECK(t_max >= 1, "optim::CosineAnnealingLR: t_max must be >= 1, got ", t_max);
  TANDEM_CHECK(eta_min >= 0.0, "optim::CosineAnnealingLR: eta_min must be >= 0, got ", eta_min);
  return [t_max, eta_min](int64_t epoch, double base_lr) {
    const double phase = std::numbers::pi * static_cast<double>(epoch) / static_cast<double>(t_max);
    return eta_min + (base_lr - eta_min) * (1.0 + std::cos(phase)) / 2.0;
  };
}

LRScheduler::Schedule linear_schedule(double start_factor, double end_factor, int64_t total_iters) {
  TANDEM_CHECK(start_factor > 0.0 && start_factor <= 1.0, "optim::LinearLR: start_factor must be in (0, 1], got ",
               start_factor);
  TANDEM_CHECK(end_factor >= 0.0 && end_factor <= 1.0, "optim::LinearLR: end_factor must be in [0, 1], got ",
               end_factor);
  TANDEM_CHECK(total_iters >= 1, "optim::LinearLR: total_iters must be >= 1, got ", total_iters);
  return [start_factor, end_factor, total_iters](int64_t epoch, double base_lr) {
    const double progress = static_cast<double>(std::min(epoch, total_iters)) / static_cast<double>(total_iters);
    return base_lr * (start_factor + (end_factor - start_factor) * progress);
  };
}

LRScheduler::Schedule sequential_schedule(const Optimizer& optimizer, const std::vector<const LRScheduler*>& schedulers,
                                          std::vector<int64_t> milestones) {
  TANDEM_CHECK(!schedulers.empty(), "optim::SequentialLR: got no schedulers");
  std::vector<LRScheduler::Schedule> schedules;
  for (size_t i = 0; i < schedulers.size(); ++i) {
    TANDEM_CHECK(schedulers[i] != nullptr, "optim::SequentialLR: scheduler ", i, " is null");
    TANDEM_CHECK(&schedulers[i]->optimizer() == &optimizer, "optim::SequentialLR: scheduler ", i,
                 " drives another optimizer than the one given");
    schedules.push_back(schedulers[i]->schedule());
  }
  TANDEM_CHECK(milestones.size() + 1 == schedulers.size(), "optim::SequentialLR: got ", milestones.size(),
               " milestones for ", schedulers.size(), " schedulers; expected one fewer milestones than schedulers");
  for (size_t i = 0; i < milestones.size(); ++i) {
    TANDEM_CHECK(milestones[i] > (i == 0 ? 0 : milestones[i - 1]), "optim::SequentialLR: milestone ", i, " is ",
                 milestones[i], " but milestones must be > 0 and strictly increasing");
  }
  return [schedules = std::move(schedules), milestones = std::move(milestones)](int64_t epoch, double base_lr) {
    const size_t index =
        static_cast<size_t>(std::upper_bound(milestones.begin(), milestones.end(), epoch) - milestones.begin());
    const int64_t start = index == 0 ? 0 : milestones[index - 1];
    return schedules[index](epoch - start, base_lr);
  };
}

}  // namespace

LRScheduler::LRScheduler(Optimizer& optimizer, Schedule schedule, const char* who)
    : who_(who), optimizer_(optimizer), schedule_(std::move(schedule)) {
  TANDEM_CHECK(schedule_ != nullptr, who_, ": the schedule is empty");
  base_lrs_ = optimizer_.initial_lrs();
  apply();
}

void LRScheduler::step() { set_last_epoch(last_epoch_ + 1); }

void LRScheduler::set_last_epoch(int64_t epoch) {
  TANDEM_CHECK(epoch >= 0, who_, "::set_last_epoch: epoch must be >= 0, got ", epoch);
  const int64_t previous = last_epoch_;
  last_epoch_ = epoch;
  try {
    apply();
  } catch (...) {
    last_epoch_ = previous;
    throw;
  }
}

// Note [Schedules set every group or none]: the lrs are all computed and checked before the first is set, so a
// schedule value that set_lr would refuse leaves the optimizer as it was.
void LRScheduler::apply() {
  std::vector<double> lrs;
  for (size_t group = 0; group < base_lrs_.size(); ++group) {
    const double lr = schedule_(last_epoch_, base_lrs_[group]);
    TANDEM_CHECK(lr >= 0.0, who_, ": the schedule gives lr ", lr, " for group ", group, " at epoch ", last_epoch_,
                 " but expected a value >= 0");
    lrs.push_back(lr);
  }
  for (size_t group = 0; group < lrs.size(); ++group) optimizer_.set_lr(group, lrs[group]);
  last_lr_ = std::move(lrs);
}

StepLR::StepLR(Optimizer& optimizer, int64_t step_size, double gamma)
    : LRScheduler(optimizer, step_schedule(step_size, gamma), "optim::StepLR") {}

CosineAnnealingLR::CosineAnnealingLR(Optimizer& optimizer, int64_t t_max, double eta_min)
    : LRScheduler(optimizer, cosine_schedule(t_max, eta_min), "optim::CosineAnnealingLR") {}

LinearLR::LinearLR(Optimizer& optimizer, double start_factor, double end_factor, int64_t total_iters)
    : LRScheduler(optimizer, linear_schedule(start_factor, end_factor, total_iters), "optim::LinearLR") {}

SequentialLR::SequentialLR(Optimizer& optimizer, const std::vector<const LRScheduler*>& schedulers,
                           std::vector<int64_t> milestones)
    : LRScheduler(optimizer, sequential_schedule(optimizer, schedulers, std::move(milestones)), "optim::SequentialLR") {
}

}  // namespace tandem::optim
