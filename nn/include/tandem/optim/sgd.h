#pragma once
// optim::SGD: stochastic gradient descent with momentum, dampening, weight decay and Nesterov momentum, exactly as
// torch.optim.SGD:
//   d = grad + weight_decay * param
//   buf = d on the first step, else momentum * buf + (1 - dampening) * d          (when momentum != 0)
//   d = nesterov ? d + momentum * buf : buf                                         (when momentum != 0)
//   param -= lr * d
// Each parameter is updated by one fused in-place kernel (tandem::sgd_update); step() never waits for the device.

#include <vector>

#include "tandem/core/tensor.h"
#include "tandem/optim/optimizer.h"

namespace tandem::optim {

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0.0;
  double weight_decay = 0.0;
  double dampening = 0.0;
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  // parameters: defined leaf tensors, no duplicates, not empty. Options are validated: lr >= 0, momentum >= 0,
  // weight_decay >= 0, and nesterov needs momentum > 0 and dampening == 0.
  SGD(std::vector<Tensor> parameters, SGDOptions options);

  // Updates every parameter that has a gradient; parameters without one are skipped (their momentum is kept).
  void step() override;

  const SGDOptions& options() const { return options_; }
  void set_lr(double lr);  // lr >= 0 (for schedules)

  // Optimizer state, for checkpoints: one momentum buffer per parameter, undefined where none exists yet (momentum
  // 0, or the parameter never had a gradient). These are the live buffers: step() updates them in place.
  std::vector<Tensor> momentum_buffers() const { return momentum_buffers_; }
  // Restores the state: one entry per parameter, undefined or of the parameter's shape (any device: values are
  // copied onto the parameter's device, never aliased).
  void set_momentum_buffers(const std::vector<Tensor>& buffers);
  // The checkpoint state of an Optimizer: the momentum buffers.
  std::vector<Tensor> state() const override { return momentum_buffers(); }
  void set_state(const std::vector<Tensor>& state) override { set_momentum_buffers(state); }

 private:
  std::vector<Tensor> momentum_buffers_;
  SGDOptions options_;
};

}  // namespace tandem::optim
