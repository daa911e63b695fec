#include "tandem/nn/training_mode_guard.h"

namespace tandem::nn {

TrainingModeGuard::TrainingModeGuard(Module& module, bool training) : module_(module), saved_(module.training_modes()) {
  module_.train(training);
}

TrainingModeGuard::~TrainingModeGuard() {
  if (module_.training_modes().size() == saved_.size()) {
    module_.set_training_modes(saved_);
  } else {
    module_.train(saved_.front());
  }
}

}  // namespace tandem::nn
