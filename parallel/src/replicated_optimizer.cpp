#include "tandem/parallel/replicated_optimizer.h"

#include "tandem/core/error.h"

namespace tandem::parallel {

ReplicatedOptimizer::ReplicatedOptimizer(ReplicatedModule& model, const Factory& make, const char* name)
    : name_(name), model_(model) {
  TANDEM_CHECK(make != nullptr, name_, ": the factory is empty");
  optimizers_.reserve(model.size());
  for (size_t d = 0; d < model.size(); ++d) {
    const std::vector<Tensor> parameters = model.replicas()[d]->parameters();
    std::unique_ptr<optim::Optimizer> optimizer = make(parameters);
    TANDEM_CHECK(optimizer != nullptr, name_, ": the factory returned null for replica ", d);
    const std::vector<Tensor>& optimized = optimizer->parameters();
    bool same = optimized.size() == parameters.size();
    for (size_t i = 0; same && i < parameters.size(); ++i) same = optimized[i].is_same(parameters[i]);
    TANDEM_CHECK(same, name_, ": the factory returned an optimizer over ", optimized.size(), " parameters for replica ",
                 d, " that are not the ", parameters.size(), " parameters it was given");
    optimizers_.push_back(std::move(optimizer));
  }
}

void ReplicatedOptimizer::step() {
  for (const std::unique_ptr<optim::Optimizer>& optimizer : optimizers_) optimizer->step();
}

void ReplicatedOptimizer::zero_grad() { model_.zero_grad(); }

void ReplicatedOptimizer::replayable_step() {
  for (const std::unique_ptr<optim::Optimizer>& optimizer : optimizers_) optimizer->replayable_step();
}

bool ReplicatedOptimizer::steps_in_backward() const {
  if (!model_.sums_on_comm_streams()) return false;
  for (const std::unique_ptr<optim::Optimizer>& optimizer : optimizers_) {
    if (!optimizer->steps_parameters_apart()) return false;
  }
  return true;
}

void ReplicatedOptimizer::step_parameters(const std::vector<size_t>& indices, StepForm form, UpdateStream stream) {
  for (const std::unique_ptr<optim::Optimizer>& optimizer : optimizers_) {
    if (form == StepForm::Replayable) {
      optimizer->replayable_step_parameters(indices, stream);
    } else {
      optimizer->step_parameters(indices, stream);
    }
  }
}

bool ReplicatedOptimizer::creates_state(const std::vector<size_t>& indices) const {
  for (const std::unique_ptr<optim::Optimizer>& optimizer : optimizers_) {
    if (optimizer->creates_state(indices)) return true;
  }
  return false;
}

optim::Optimizer& ReplicatedOptimizer::at(size_t replica) const {
  TANDEM_CHECK(replica < optimizers_.size(), name_, "::optimizer: replica ", replica, " but there are ",
               optimizers_.size());
  return *optimizers_[replica];
}

void ReplicatedOptimizer::set_state(const std::vector<Tensor>& state) {
  for (const std::unique_ptr<optim::Optimizer>& optimizer : optimizers_) optimizer->set_state(state);
}

ReplicatedSGD::ReplicatedSGD(ReplicatedModule& model, optim::SGDOptions options)
    : ReplicatedOptimizer(
          model,
          [options](std::vector<Tensor> parameters) {
            return std::make_unique<optim::SGD>(std::move(parameters), options);
          },
          "parallel::ReplicatedSGD") {}

void ReplicatedSGD::set_lr(double lr) {
  for (size_t d = 0; d < size(); ++d) optimizer(d).set_lr(lr);
}

const optim::SGDOptions& ReplicatedSGD::options() const {
  return static_cast<const optim::SGD&>(ReplicatedOptimizer::optimizer(0)).options();
}

optim::SGD& ReplicatedSGD::optimizer(size_t replica) {
  // Every optimizer was built by the SGD factory above.
  return static_cast<optim::SGD&>(ReplicatedOptimizer::optimizer(replica));
}

}  // namespace tandem::parallel
