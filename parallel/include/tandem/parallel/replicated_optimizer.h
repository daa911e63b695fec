#pragma once
// Optimizers for the fast training path (ReplicatedModule): one optim::Optimizer per replica, each over its
// replica's parameters. After the gradients are summed (ReplicatedModule::forward_backward or reduce_gradients())
// every replica has the same gradients, so identical steps keep the replicas identical: no broadcast is needed.
//
//   parallel::ReplicatedModule model(net, devices);
//   parallel::ReplicatedSGD sgd(model, {.lr = 0.1, .momentum = 0.9});              // the usual case
//   parallel::ReplicatedOptimizer custom(model, [](std::vector<Tensor> parameters) {  // any optim::Optimizer
//     return std::make_unique<MyOptimizer>(std::move(parameters));
//   });

#include <cstddef>
#include <functional>
#include <memory>
#include <vector>

#include "tandem/core/tensor.h"
#include "tandem/optim/optimizer.h"
#include "tandem/optim/sgd.h"
#include "tandem/parallel/replicated.h"

namespace tandem::parallel {

class ReplicatedOptimizer {
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

  void step();       // steps every replica's optimizer
  void zero_grad();  // model.zero_grad(): the gradients stay views of the flat buffers
  size_t size() const { return optimizers_.size(); }
  // Replica d's optimizer; replica 0's updates the master. Errors: no such replica.
  optim::Optimizer& optimizer(size_t replica) { return at(replica); }
  const optim::Optimizer& optimizer(size_t replica) const { return at(replica); }

  // Checkpoint state: the master's optimizer's state(); setting it sets every replica's (values copied).
  std::vector<Tensor> state() const { return optimizers_.front()->state(); }
  void set_state(const std::vector<Tensor>& state);

 protected:
  ReplicatedOptimizer(ReplicatedModule& model, const Factory& make, const char* name);  // errors start with `name`

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

}  // namespace tandem::parallel
