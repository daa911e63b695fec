#pragma once
// optim::SGD: stochastic gradient descent with momentum, dampening, weight decay and Nesterov momentum, exactly as
// torch.optim.SGD. The rule has one home, tandem::SgdUpdate in tandem/core/fused.h, whose fused in-place kernel
// (tandem::sgd_update) updates each parameter; SGDOptions are the user's options (doubles, checked), from which each
// step fills the kernel's SgdUpdate (floats, the first step marked). step() never waits for the device.
// Parameter groups and set_lr as in optim::Optimizer.

#include <initializer_list>
#include <vector>

#include "tandem/core/fused.h"
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
  // Parameter groups (see ParamGroup), each with its own options or `defaults`; every group's options validated.
  SGD(std::vector<ParamGroup<SGDOptions>> groups, SGDOptions defaults);
  // The same for a braced list of groups (which also makes SGD({}, options) mean no groups, unambiguously).
  SGD(std::initializer_list<ParamGroup<SGDOptions>> groups, SGDOptions defaults)
      : SGD(std::vector<ParamGroup<SGDOptions>>(groups), defaults) {}

  // Updates every parameter that has a gradient; parameters without one are skipped (their momentum is kept).
  void step() override {
    check_gradients("step");
    step_part(every_index(), UpdateStream::Compute, /*replayable=*/false);
  }
  // Each parameter's update depends on nothing else (Note [Stepping parameters apart] in optimizer.h).
  bool steps_parameters_apart() const override { return true; }

  // Group `group`'s options, with the lr set_lr last set. Errors: no such group.
  const SGDOptions& options(size_t group = 0) const;

  // Optimizer state, for checkpoints: one momentum buffer per parameter, undefined where none exists yet (momentum
  // 0, or the parameter never had a gradient). These are the live buffers: step() updates them in place.
  std::vector<Tensor> momentum_buffers() const { return momentum_buffers_; }
  // Restores the state: one entry per parameter, undefined or of the parameter's shape (any device: values are
  // copied onto the parameter's device, never aliased).
  void set_momentum_buffers(const std::vector<Tensor>& buffers);
  // The checkpoint state of an Optimizer: the momentum buffers.
  std::vector<Tensor> state() const override { return momentum_buffers(); }
  void set_state(const std::vector<Tensor>& state) override { set_momentum_buffers(state); }
  // The same by name: kind "optim::SGD", version 1, a slot "momentum_buffer" where a buffer exists, steps 0 (SGD
  // does not count them; load_state_dict ignores them).
  OptimizerState state_dict() const override;
  void load_state_dict(const OptimizerState& state) override;

  // Note [Replayed optimizer steps] in optimizer.h: the learning rates come from device memory; SGD keeps no host
  // state that a step changes once the momentum buffers exist, so finish_replay() does nothing.
  bool replayable() const override { return true; }
  void prepare_replay() override;
  void replayable_step() override { step_part(every_index(), UpdateStream::Compute, /*replayable=*/true); }
  void finish_replay() override {}

 private:
  // The update of one parameter with its group's options.
  SgdUpdate update_of(size_t parameter, bool first_step) const;
  // step() and replayable_step() over `indices`, and whether that would create momentum buffers.
  void step_part(const std::vector<size_t>& indices, UpdateStream stream, bool replayable) override;
  bool part_creates_state(const std::vector<size_t>& indices) const override;
  double group_lr(size_t group) const override { return groups_[group].lr; }
  void set_group_lr(size_t group, double lr) override { groups_[group].lr = lr; }

  std::vector<Tensor> momentum_buffers_;
  std::vector<SGDOptions> groups_;
};

}  // namespace tandem::optim
