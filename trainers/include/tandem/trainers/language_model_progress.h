#pragma once
// Where a LanguageModelTrainer's run stands beyond its model and optimizer: what its checkpoints record
// (checkpoint.h) so that a resumed run draws the windows and keeps the evaluations of the uninterrupted one.

#include <cstdint>
#include <vector>

namespace tandem::trainers {

// An evaluation: after `step` steps, the mean loss of each split's evaluation batches (nats per token).
struct LanguageModelEvaluation {
  int64_t step = 0;
  double train_loss = 0.0;
  double val_loss = 0.0;
  bool operator==(const LanguageModelEvaluation&) const = default;
};

struct LanguageModelProgress {
  uint64_t train_draws = 0;  // values drawn from the batches' stream
  uint64_t eval_draws = 0;   // from the evaluation stream
  std::vector<LanguageModelEvaluation> evaluations;  // in step order, each after a step of the run
  bool operator==(const LanguageModelProgress&) const = default;
};

}  // namespace tandem::trainers
