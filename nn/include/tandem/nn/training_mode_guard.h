#pragma once
// nn::TrainingModeGuard: puts a module tree in training or eval mode for a scope and gives every module its own
// previous mode back when the scope ends, by an exception too:
//
//   {
//     nn::TrainingModeGuard eval_mode(*model, /*training=*/false);
//     predictions = model->forward(x);
//   }  // each module of `model` is in the mode it had before, a submodule switched on its own included

#include <vector>

#include "tandem/nn/module.h"

namespace tandem::nn {

class TrainingModeGuard {
 public:
  // `module` must outlive the guard.
  TrainingModeGuard(Module& module, bool training);
  // Restores the saved flags; when the tree gained or lost modules inside the scope, every module takes the root's
  // saved mode instead (as `module.train(was_training)` does).
  ~TrainingModeGuard();
  TrainingModeGuard(const TrainingModeGuard&) = delete;
  TrainingModeGuard& operator=(const TrainingModeGuard&) = delete;

 private:
  Module& module_;
  std::vector<bool> saved_;
};

}  // namespace tandem::nn
