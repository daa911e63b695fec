#include "tandem/parallel/replayable_steps.h"

#include <algorithm>

namespace tandem::parallel {

bool ReplayableSteps::replayable() const {
  const std::vector<std::unique_ptr<optim::Optimizer>>& optimizers = local_optimizers();
  return std::all_of(optimizers.begin(), optimizers.end(),
                     [](const std::unique_ptr<optim::Optimizer>& optimizer) { return optimizer->replayable(); });
}

uint64_t ReplayableSteps::state_generation() const {
  uint64_t sum = 0;
  for (const std::unique_ptr<optim::Optimizer>& optimizer : local_optimizers()) sum += optimizer->state_generation();
  return sum;
}

void ReplayableSteps::prepare_replay() {
  for (const std::unique_ptr<optim::Optimizer>& optimizer : local_optimizers()) optimizer->prepare_replay();
}

void ReplayableSteps::finish_replay() {
  for (const std::unique_ptr<optim::Optimizer>& optimizer : local_optimizers()) optimizer->finish_replay();
}

}  // namespace tandem::parallel
