#pragma once
// Learning-rate schedules for the Trainer, by name: a small grammar over optim's schedulers (optim/lr_scheduler.h),
// so that a command line can choose one.
//
//   schedule := none | decay | warmup:N | warmup:N+decay
//   decay    := step:S:GAMMA | cosine
//
//   none           the optimizer's lr throughout
//   step:S:GAMMA   lr * GAMMA^floor(epoch / S)                            (optim::StepLR; S >= 1, 0 < GAMMA <= 1)
//   cosine         lr * (1 + cos(pi * epoch / epochs)) / 2                (optim::CosineAnnealingLR, t_max = epochs)
//   warmup:N       lr * (epoch + 1) / (N + 1) for the first N epochs, then lr  (optim::LinearLR; 1 <= N <= epochs)
//   warmup:N+D     the warm-up, then D counted from 0 at epoch N; a cosine then spans the epochs - N epochs left
//                  (optim::SequentialLR; N < epochs)
// Epochs are counted from 0; epoch e trains at the schedule's lr for e.

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "tandem/optim/lr_scheduler.h"
#include "tandem/optim/optimizer.h"

namespace tandem::trainers {

struct LrSchedule {
  // Recorded as the setup fact "lr_schedule": a resume must use the same schedule. parse_lr_schedule gives the
  // canonical text with the epoch counts it resolved, e.g. "warmup:5+cosine (t_max 95)".
  std::string name;
  // Builds the schedule over one optimizer; the Trainer builds one per replica and moves them all to each epoch
  // with LRScheduler::set_last_epoch.
  std::function<std::unique_ptr<optim::LRScheduler>(optim::Optimizer&)> make;
};

// The schedule `text` names for a run of `epochs` epochs; nullopt for "none". Errors: anything outside the grammar
// above (naming the text and the grammar), a count or factor out of its range, epochs < 1.
std::optional<LrSchedule> parse_lr_schedule(std::string_view text, int64_t epochs);

}  // namespace tandem::trainers
