#pragma once
// What a captured parallel::TrainingStep needs of the optimizer it steps, whichever holds the state (a
// ReplicatedOptimizer: every replica all of it; a ShardedOptimizer: every device its shard): the step split into the
// three parts of Note [Replayed optimizer steps] in tandem/optim/optimizer.h, over every local device's
// optim::Optimizer.

#include <cstdint>
#include <memory>
#include <vector>

#include "tandem/optim/optimizer.h"

namespace tandem::parallel {

class ReplayableSteps {
 public:
  // The eager step over every local device (what replayable_step() splits).
  virtual void step() = 0;
  // Whether every local device's optimizer can split its step for a replay.
  bool replayable() const;
  // The sum of the local devices' optim::Optimizer::state_generation(): it changes whenever one of them replaces or
  // creates state tensors (a captured graph would then update tensors that are gone).
  uint64_t state_generation() const;
  // The three parts, with optim::Optimizer's errors: the host's upload of the step's hyper-parameters before a
  // replay, on every local device; the captured update; the host's bookkeeping after the replay is issued, on every
  // local device.
  void prepare_replay();
  virtual void replayable_step() = 0;
  void finish_replay();

 protected:
  ReplayableSteps() = default;
  ~ReplayableSteps() = default;
  ReplayableSteps(const ReplayableSteps&) = default;
  ReplayableSteps& operator=(const ReplayableSteps&) = default;

  // One optimizer per local device.
  virtual const std::vector<std::unique_ptr<optim::Optimizer>>& local_optimizers() const = 0;
};

}  // namespace tandem::parallel
