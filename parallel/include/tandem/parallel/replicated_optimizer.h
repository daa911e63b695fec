#pragma once
// Optimizers for the fast training path (ReplicatedModule): one optim::Optimizer per replica, each over its
// replica's parameters. After the gradients are summed (ReplicatedModule::forward_backward or reduce_gradients())
// every replica has the same gradients, so identical steps keep the replicas identical: no broadcast is needed.
//
//   parallel::ReplicatedModule model(net, devices);
//   parallel::ReplicatedSGD sgd(model, {.lr = 0.1, .momentum = 0.9});              // the usual case
//   parallel::ReplicatedAdamW adamw(model, {.lr = 1e-3, .weight_decay = 0.01});     // Adam and AdamW likewise
//   parallel::ReplicatedOptimizer custom(model, [](std::vector<Tensor> parameters) {  // any optim::Optimizer
//     return std::make_unique<MyOptimizer>(std::move(parameters));
//   });

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "tandem/core/fused.h"
#include "tandem/core/tensor.h"
#include "tandem/optim/adam.h"
#include "tandem/optim/optimizer.h"
#include "tandem/optim/sgd.h"
#include "tandem/parallel/replayable_steps.h"
#include "tandem/parallel/replicated.h"

namespace tandem::parallel {

// Which form of an optimizer's step to take: step()'s, or replayable_step()'s for a captured step (Note [Replayed
// optimizer steps] in tandem/optim/optimizer.h).
enum class StepForm { Eager, Replayable };

class ReplicatedOptimizer : public ReplayableSteps {
 public:
  // Builds an optimizer over the given parameters (one replica's, in parameters() order). Its step must depend only
  // on the parameters, their gradients and its own state, so that equal replicas stay equal.
  using Factory = std::function<std::unique_ptr<optim::Optimizer>(std::vector<Tensor> parameters)>;

  // Calls `make` once per replica. `model` must outlive the optimizer.
  // Errors: an empty factory; a factory that returns null or an optimizer over other parameters than it was given.
  ReplicatedOptimizer(ReplicatedModule& model, const Factory& make)
      : ReplicatedOptimizer(model, make, "parallel::ReplicatedOptimizer") {}
  virtual ~ReplicatedOptimizer() = default;
  ReplicatedOptimizer(const ReplicatedOptimizer&) = delete;
  ReplicatedOptimizer& operator=(const ReplicatedOptimizer&) = delete;

  void step() override;  // steps every replica's optimizer
  void zero_grad();  // model.zero_grad(): the gradients stay views of the flat buffers

  // A step split for a CUDA graph (Note [Replayed optimizer steps] in tandem/optim/optimizer.h), on every replica's
  // optimizer: replayable() when all of them are; the three parts, each on every replica, with their errors.
  // replayable(), state_generation(), prepare_replay(), finish_replay(): ReplayableSteps's.
  void replayable_step() override;
  size_t size() const { return optimizers_.size(); }
  ReplicatedModule& model() const { return model_; }

  // ---- steps in backward (Note [Optimizer steps in backward] in steps_in_backward.h) ----
  // Whether a TrainingStep may update each gradient bucket's parameters as soon as the bucket's sum has started:
  // every replica's optimizer steps its parameters apart (optim::Optimizer::steps_parameters_apart()) and the model's
  // sums allow it (ReplicatedModule::sums_on_comm_streams()). Otherwise it takes the plain step after the whole
  // reduction (as it does with TrainingStepOptions::steps_in_backward false); both give bitwise the same parameters.
  bool steps_in_backward() const;
  // On every replica, optim::Optimizer::step_parameters (form Replayable: replayable_step_parameters) of `indices`,
  // with the kernels on `stream`. Errors: as there.
  void step_parameters(const std::vector<size_t>& indices, StepForm form, UpdateStream stream);
  // Whether step_parameters(indices, ...) would create state on some replica (optim::Optimizer::creates_state).
  bool creates_state(const std::vector<size_t>& indices) const;
  // Replica d's optimizer; replica 0's updates the master. Errors: no such replica.
  optim::Optimizer& optimizer(size_t replica) { return at(replica); }
  const optim::Optimizer& optimizer(size_t replica) const { return at(replica); }

  // Checkpoint state: the master's optimizer's state(); setting it sets every replica's (values copied).
  std::vector<Tensor> state() const { return optimizers_.front()->state(); }
  void set_state(const std::vector<Tensor>& state);
  // The same by name (optim::Optimizer::state_dict), for optimizers whose state state() cannot hold (Adam).
  optim::OptimizerState state_dict() const { return optimizers_.front()->state_dict(); }
  void load_state_dict(const optim::OptimizerState& state) {
    for (const std::unique_ptr<optim::Optimizer>& optimizer : optimizers_) optimizer->load_state_dict(state);
  }

 protected:
  ReplicatedOptimizer(ReplicatedModule& model, const Factory& make, const char* name);  // errors start with `name`
  const std::vector<std::unique_ptr<optim::Optimizer>>& local_optimizers() const override { return optimizers_; }

 private:
  optim::Optimizer& at(size_t replica) const;

  const char* name_;
  ReplicatedModule& model_;
  std::vector<std::unique_ptr<optim::Optimizer>> optimizers_;
};

// The default: one optim::SGD per replica with the same options.
class ReplicatedSGD : public ReplicatedOptimizer {
 public:
  ReplicatedSGD(ReplicatedModule& model, optim::SGDOptions options);

  void set_lr(double lr);  // on every replica
  const optim::SGDOptions& options() const;
  // Replica d's optimizer (the one ReplicatedOptimizer::optimizer returns), as the SGD it is.
  optim::SGD& optimizer(size_t replica);

  // SGD's names for state() and set_state().
  std::vector<Tensor> momentum_buffers() const { return state(); }
  void set_momentum_buffers(const std::vector<Tensor>& buffers) { set_state(buffers); }
};

// One optim::Adam (AdamW) per replica with the same options. An LR schedule drives each replica's optimizer: one
// scheduler per optimizer(d), stepped together, or set_lr with the schedule's lr_at.
template <bool kDecoupledWeightDecay>
class ReplicatedAdamFamily : public ReplicatedOptimizer {
 public:
  using Options = optim::AdamFamilyOptions<kDecoupledWeightDecay>;
  ReplicatedAdamFamily(ReplicatedModule& model, Options options)
      : ReplicatedOptimizer(
            model,
            [options](std::vector<Tensor> parameters) {
              return std::make_unique<optim::AdamFamily<kDecoupledWeightDecay>>(std::move(parameters), options);
            },
            kDecoupledWeightDecay ? "parallel::ReplicatedAdamW" : "parallel::ReplicatedAdam") {}

  void set_lr(double lr) {  // on every replica
    for (size_t d = 0; d < size(); ++d) optimizer(d).set_lr(lr);
  }
};
using ReplicatedAdam = ReplicatedAdamFamily<false>;
using ReplicatedAdamW = ReplicatedAdamFamily<true>;

}  // namespace tandem::parallel
