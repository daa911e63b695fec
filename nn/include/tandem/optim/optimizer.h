#pragma once
// optim::Optimizer: what every optimizer over a list of parameters offers, so that code above nn (the replicated
// training path, the Trainer, LR schedulers) can drive any of them: an update step, zeroing the gradients, parameter
// groups with their learning rates, and the state a checkpoint keeps.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tandem/core/device_scalars.h"
#include "tandem/core/fused.h"
#include "tandem/core/tensor.h"
#include "tandem/optim/optimizer_state.h"

namespace tandem::optim {

// A parameter group, as torch.optim's: parameters that share their options. Options given here replace the
// optimizer's defaults entirely (as LibTorch's OptimizerParamGroup); without them the group takes the defaults.
//   optim::AdamW adamw({{.parameters = weights}, {.parameters = biases, .options = no_decay}}, defaults);
template <typename Options>
struct ParamGroup {
  std::vector<Tensor> parameters;
  std::optional<Options> options;
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // Updates every parameter that has a gradient from it; parameters without one are skipped.
  virtual void step() = 0;

  // ---- steps over part of the parameters ----
  // Note [Stepping parameters apart]: an optimizer whose update of each parameter depends on nothing but that
  // parameter, its gradient, its own state and the options (SGD, Adam and AdamW; not one that needs every gradient
  // first, as clipping by the global norm or a line search does) can update its parameters in parts: step_parameters
  // over the parts of a partition of parameters() computes exactly what one step() computes, with the same kernels
  // and bitwise the same results, and replayable_step_parameters likewise for replayable_step(). So the parameters
  // whose gradients are final can be updated while the others' are still being computed (parallel::ReplicatedOptimizer
  // updates each gradient bucket as soon as it is summed: Note [Optimizer steps in backward] in
  // parallel/src/steps_in_backward.h). A part's update may run on the devices' communication streams
  // (UpdateStream::Communication, Note [Updates on the communication stream] in tandem/core/fused.h), as long as it
  // creates no state there: creating state (a first step) allocates and fills on the compute stream.
  // Whether this optimizer can step its parameters apart (the default cannot).
  virtual bool steps_parameters_apart() const { return false; }
  // The part of step() that updates parameters()[i] for each i in `indices` (any order) that has a gradient, its host
  // state advanced as step() advances it (Adam's step counts), its kernels on `stream`.
  // Errors: an optimizer that cannot step apart; an index out of range or listed twice; on the communication stream,
  // a parameter whose update would create its state (creates_state).
  void step_parameters(const std::vector<size_t>& indices, UpdateStream stream = UpdateStream::Compute);
  // The same part of replayable_step() (Note [Replayed optimizer steps]): no host state changes; finish_replay()
  // counts the step of every parameter that has a gradient, as after replayable_step(). Errors: as step_parameters
  // and replayable_step.
  void replayable_step_parameters(const std::vector<size_t>& indices, UpdateStream stream = UpdateStream::Compute);
  // Whether step_parameters(indices) would create state: a parameter among them that has a gradient but no state yet
  // (SGD's momentum buffer, Adam's moments: before its first step). Errors: as step_parameters's about indices.
  bool creates_state(const std::vector<size_t>& indices) const;

  // As nn::Module::zero_grad.
  void zero_grad(bool set_to_none = true);
  // Every group's parameters, group after group.
  const std::vector<Tensor>& parameters() const { return parameters_; }

  // ---- parameter groups and learning rates ----
  size_t param_group_count() const { return group_ends_.size(); }
  // The index in parameters() of group `group`'s first parameter, and one past its last. Errors: no such group.
  size_t param_group_begin(size_t group) const;
  size_t param_group_end(size_t group) const;
  // The group of parameters()[parameter]. Errors: no such parameter.
  size_t param_group_of(size_t parameter) const;
  // A group's learning rate. Errors: no such group; an optimizer without learning rates.
  double lr(size_t group) const;
  // Sets one group's learning rate, or every group's. Errors: no such group; lr < 0 (or NaN); an optimizer without
  // learning rates.
  void set_lr(size_t group, double lr);
  void set_lr(double lr);
  // The learning rates LR schedules start from, one per group (PyTorch's "initial_lr"): the groups' learning rates
  // when this is first called, which the first scheduler built over this optimizer does.
  const std::vector<double>& initial_lrs();

  // ---- state, for checkpoints ----
  // The optimizer's state by parameter and name (see optimizer_state.h). The default, for optimizers that only
  // implement state(): kind = the optimizer's name, version 1, one slot "state" where state() has a tensor.
  virtual OptimizerState state_dict() const;
  // Restores state_dict()'s state (values copied onto the parameters' devices, never aliased). Everything is checked
  // before anything is written. Errors: another kind or version, another parameter count, unknown or missing slots,
  // shapes other than the parameter's. The default accepts what the default state_dict() writes.
  virtual void load_state_dict(const OptimizerState& state);
  // The one-tensor-per-parameter form of the state that checkpoints keep today: at most one tensor per parameter
  // (of the parameter's shape), in parameters() order, undefined where there is none. Errors: an optimizer whose
  // state does not fit that form (optim::Adam: use state_dict()).
  virtual std::vector<Tensor> state() const;
  // Restores state(): one entry per parameter, undefined or of the parameter's shape (any device: values are
  // copied onto the parameter's device, never aliased). Errors: another count or shape; as state().
  virtual void set_state(const std::vector<Tensor>& state);

  // ---- replayed steps ----
  // Note [Replayed optimizer steps]: a step captured into a CUDA graph (parallel::TrainingStep) runs the kernels it
  // was captured with, with their arguments, at every replay; so step() is split into three parts, whose sequence
  // prepare_replay(), replayable_step(), finish_replay() computes exactly what step() computes:
  //  - prepare_replay(), on the host before each replay: writes the hyper-parameters that change between steps into
  //    a small buffer on the parameters' device (the learning rates; for Adam the factors of step t = step count + 1,
  //    Note [Hyper-parameters in device memory] in tandem/core/fused.h), with one asynchronous copy ordered before
  //    the work issued after it. So set_lr and LR schedules take effect at the next replay, without a new capture.
  //  - replayable_step(), captured once: the update kernels of step(), reading those values from the buffer. It
  //    changes no host state (capturing it must leave the optimizer as it was) and creates no state: the state that
  //    step() creates on its first call (momentum buffers, Adam's moments) must exist, so take one step() first.
  //  - finish_replay(), on the host after each replay is issued: advances the host state as step() does (Adam's step
  //    counts of the parameters that have a gradient), so that state_dict() and checkpoints stay right.
  // The buffer and the state are used at the addresses they had when the step was captured: replacing state
  // (load_state_dict, set_state) or parameters invalidates a captured step.
  // Whether this optimizer can be split so (SGD, Adam and AdamW can; the default cannot).
  virtual bool replayable() const { return false; }
  // Errors (all three): an optimizer that is not replayable; parameters on more than one device (prepare_replay);
  // replayable_step before prepare_replay, or with a parameter that has a gradient but no state yet.
  virtual void prepare_replay();
  virtual void replayable_step();
  virtual void finish_replay();
  // Changes whenever a replayable optimizer replaces or creates state tensors (a first step, load_state_dict,
  // set_state), which a captured step must not outlive: parallel::TrainingStep captures again when it changed.
  uint64_t state_generation() const { return state_generation_; }

 protected:
  // Requires defined leaf tensors, no duplicates, not empty; errors start with `who` ("optim::SGD").
  Optimizer(std::vector<Tensor> parameters, const char* who);
  // The same over groups (which may be empty, as long as some group is not).
  Optimizer(std::vector<std::vector<Tensor>> groups, const char* who);
  Optimizer(Optimizer&&) = default;
  const char* who() const { return who_; }

  // For load_state_dict, with errors that start with "<who>::load_state_dict: ": throws unless `state` is of this
  // optimizer's kind (its who) and `version` and holds one entry per parameter, with no negative step ...
  void check_state_kind(const OptimizerState& state, int64_t version) const;
  // ... and unless `tensor`, slot `slot` of parameter `parameter`, is defined with that parameter's shape.
  void check_state_tensor(size_t parameter, const std::string& slot, const Tensor& tensor) const;
  // A copy of `value` on parameters()[parameter]'s device (never an alias of it), for restoring state.
  Tensor copy_for(size_t parameter, const Tensor& value) const;
  // For optimizers with at most one tensor per parameter (SGD, and the default state_dict): that state under the
  // name `slot` (kind who(), version 1, steps 0), and back, checked as check_state_kind and check_state_tensor say
  // (steps are ignored), undefined where a parameter has no tensor.
  OptimizerState single_slot_state(const std::vector<Tensor>& tensors, const char* slot) const;
  std::vector<Tensor> single_slot_tensors(const OptimizerState& state, const char* slot) const;
  // Throws "<who>::<caller>: group <group> but there are <n> parameter groups" unless the group exists.
  void check_group(size_t group, const char* caller) const;
  // For replayable optimizers (Note [Replayed optimizer steps]): prepare_replay's upload of `values`, per_parameter
  // values for each parameter, into the buffer (created on the first call, on the parameters' one device) ...
  void upload_replay_values(const std::vector<float>& values, size_t per_parameter);
  // ... and parameter `parameter`'s values in it, for replayable_step (errors name `caller`).
  Tensor replay_values(size_t parameter, const char* caller) const;
  // Called by replayable optimizers whenever they replace or create state tensors (state_generation()).
  void state_replaced() { ++state_generation_; }
  // 0, 1, ..., parameters().size() - 1: what step() and replayable_step() update.
  std::vector<size_t> every_index() const;
  // Runs every parameter's gradient check (Note [Gradient checks] in tandem/core/tensor.h) with the user
  // "<who>::<caller>": step() and prepare_replay() call it before they read a gradient, so that gradients their owner
  // has not made ready (a data-parallel module's, not reduced yet) are refused with the owner's message. Optimizers
  // of users' own should call it at the start of their step() too.
  void check_gradients(const char* caller) const;
  // Whether parameters()[parameter] has a .grad, asked without zeroing a stale one (as Tensor::grad() would).
  bool has_grad(size_t parameter) const { return parameters_[parameter].impl()->grad != nullptr; }

  // What optimizers that step apart implement (Note [Stepping parameters apart]), with `indices` checked: the part
  // of step() (`replayable` false) or of replayable_step() (true) over `indices`, and creates_state. The defaults
  // throw; they are reached only when steps_parameters_apart() is true.
  virtual void step_part(const std::vector<size_t>& indices, UpdateStream stream, bool replayable);
  virtual bool part_creates_state(const std::vector<size_t>& indices) const;

 private:
  // Throws "<who>::<caller>: ..." unless this optimizer steps apart, every index names a parameter and none is
  // listed twice.
  void check_part(const std::vector<size_t>& indices, const char* caller) const;
  // A group's learning rate; the base versions throw (an optimizer without learning rates). `group` is checked.
  virtual double group_lr(size_t group) const;
  virtual void set_group_lr(size_t group, double lr);

  const char* who_;
  std::vector<Tensor> parameters_;
  std::vector<size_t> group_ends_;  // one past each group's last parameter
  std::vector<double> initial_lrs_;
  std::unique_ptr<DeviceScalars> replay_values_;  // Note [Replayed optimizer steps]
  size_t replay_values_per_parameter_ = 0;
  uint64_t state_generation_ = 0;
};

// The groups' parameters and resolved options, for the constructors of optimizers with parameter groups.
template <typename Options>
std::vector<std::vector<Tensor>> parameters_of(const std::vector<ParamGroup<Options>>& groups) {
  std::vector<std::vector<Tensor>> parameters;
  for (const ParamGroup<Options>& group : groups) parameters.push_back(group.parameters);
  return parameters;
}
template <typename Options>
std::vector<Options> options_of(const std::vector<ParamGroup<Options>>& groups, const Options& defaults) {
  std::vector<Options> options;
  for (const ParamGroup<Options>& group : groups) options.push_back(group.options.value_or(defaults));
  return options;
}

}  // namespace tandem::optim
