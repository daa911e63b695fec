#include "tandem/optim/optimizer.h"

#include <algorithm>
#include <numeric>

#include "tandem/core/autograd.h"
#include "tandem/core/error.h"
#include "tandem/core/grad_mode.h"

namespace tandem::optim {
namespace {

constexpr const char* kLegacySlot = "state";

}  // namespace

Optimizer::Optimizer(std::vector<Tensor> parameters, const char* who)
    : Optimizer(std::vector<std::vector<Tensor>>{std::move(parameters)}, who) {}

Optimizer::Optimizer(std::vector<std::vector<Tensor>> groups, const char* who) : who_(who) {
  for (std::vector<Tensor>& group : groups) {
    for (Tensor& parameter : group) parameters_.push_back(std::move(parameter));
    group_ends_.push_back(parameters_.size());
  }
  TANDEM_CHECK(!parameters_.empty(), who, ": got an empty parameter list");
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const Tensor& parameter = parameters_[i];
    TANDEM_CHECK(parameter.defined(), who, ": parameter ", i, " is undefined");
    TANDEM_CHECK(parameter.is_leaf(), who, ": parameter ", i,
                 " is the result of an operation; only leaf tensors can be optimized");
    for (size_t j = 0; j < i; ++j)
      TANDEM_CHECK(!parameters_[j].is_same(parameter), who, ": parameters ", j, " and ", i, " are the same tensor");
  }
}

void Optimizer::zero_grad(bool set_to_none) { autograd::zero_grad(parameters_, set_to_none); }

void Optimizer::step_parameters(const std::vector<size_t>& indices, UpdateStream stream) {
  check_part(indices, "step_parameters");
  step_part(indices, stream, /*replayable=*/false);
}

void Optimizer::replayable_step_parameters(const std::vector<size_t>& indices, UpdateStream stream) {
  check_part(indices, "replayable_step_parameters");
  step_part(indices, stream, /*replayable=*/true);
}

bool Optimizer::creates_state(const std::vector<size_t>& indices) const {
  check_part(indices, "creates_state");
  return part_creates_state(indices);
}

void Optimizer::step_part(const std::vector<size_t>&, UpdateStream, bool) {
  TANDEM_FAIL(who_, "::step_parameters: steps_parameters_apart() is true but step_part is not overridden");
}

bool Optimizer::part_creates_state(const std::vector<size_t>&) const {
  TANDEM_FAIL(who_, "::creates_state: steps_parameters_apart() is true but part_creates_state is not overridden");
}

void Optimizer::check_part(const std::vector<size_t>& indices, const char* caller) const {
  TANDEM_CHECK(steps_parameters_apart(), who_, "::", caller,
               ": this optimizer cannot step part of its parameters (Note [Stepping parameters apart])");
  std::vector<char> listed(parameters_.size(), 0);
  for (const size_t i : indices) {
    TANDEM_CHECK(i < parameters_.size(), who_, "::", caller, ": got parameter index ", i, " but there are ",
                 parameters_.size(), " parameters");
    TANDEM_CHECK(!listed[i], who_, "::", caller, ": parameter index ", i,
                 " is listed twice but expected each parameter at most once");
    listed[i] = 1;
  }
}

void Optimizer::check_gradients(const char* caller) const {
  std::string user;  // made only where a parameter carries a check: a plain step allocates nothing here
  for (const Tensor& parameter : parameters_) {
    if (!parameter.has_grad_check()) continue;
    if (user.empty()) user = std::string(who_) + "::" + caller;
    parameter.check_grad(user);
  }
}

std::vector<size_t> Optimizer::every_index() const {
  std::vector<size_t> indices(parameters_.size());
  std::iota(indices.begin(), indices.end(), size_t{0});
  return indices;
}

void Optimizer::prepare_replay() {
  TANDEM_FAIL(who_, "::prepare_replay: this optimizer cannot replay its steps (Note [Replayed optimizer steps])");
}

void Optimizer::replayable_step() {
  TANDEM_FAIL(who_, "::replayable_step: this optimizer cannot replay its steps (Note [Replayed optimizer steps])");
}

void Optimizer::finish_replay() {
  TANDEM_FAIL(who_, "::finish_replay: this optimizer cannot replay its steps (Note [Replayed optimizer steps])");
}

void Optimizer::upload_replay_values(const std::vector<float>& values, size_t per_parameter) {
  if (replay_values_ == nullptr) {
    const Device device = parameters_.front().device();
    for (size_t i = 1; i < parameters_.size(); ++i) {
      TANDEM_CHECK(parameters_[i].device() == device, who_, "::prepare_replay: parameter ", i, " is on ",
                   parameters_[i].device(), " but parameter 0 is on ", device,
                   "; a replayed step needs every parameter on one device");
    }
    replay_values_ = std::make_unique<DeviceScalars>(device, parameters_.size() * per_parameter);
    replay_values_per_parameter_ = per_parameter;
  }
  replay_values_->upload(values);
}

Tensor Optimizer::replay_values(size_t parameter, const char* caller) const {
  TANDEM_CHECK(replay_values_ != nullptr, who_, "::", caller, ": prepare_replay() has not run yet");
  const auto per = static_cast<int64_t>(replay_values_per_parameter_);
  return replay_values_->values().narrow(0, static_cast<int64_t>(parameter) * per, per);
}

void Optimizer::check_group(size_t group, const char* caller) const {
  TANDEM_CHECK(group < group_ends_.size(), who_, "::", caller, ": group ", group, " but there are ", group_ends_.size(),
               " parameter groups");
}

size_t Optimizer::param_group_begin(size_t group) const {
  check_group(group, "param_group_begin");
  return group == 0 ? 0 : group_ends_[group - 1];
}

size_t Optimizer::param_group_end(size_t group) const {
  check_group(group, "param_group_end");
  return group_ends_[group];
}

size_t Optimizer::param_group_of(size_t parameter) const {
  TANDEM_CHECK(parameter < parameters_.size(), who_, "::param_group_of: parameter ", parameter, " but there are ",
               parameters_.size());
  return static_cast<size_t>(std::upper_bound(group_ends_.begin(), group_ends_.end(), parameter) - group_ends_.begin());
}

double Optimizer::lr(size_t group) const {
  check_group(group, "lr");
  return group_lr(group);
}

void Optimizer::set_lr(size_t group, double lr) {
  check_group(group, "set_lr");
  TANDEM_CHECK(lr >= 0.0, who_, "::set_lr: lr must be >= 0, got ", lr);
  set_group_lr(group, lr);
}

void Optimizer::set_lr(double lr) {
  for (size_t group = 0; group < param_group_count(); ++group) set_lr(group, lr);
}

const std::vector<double>& Optimizer::initial_lrs() {
  if (initial_lrs_.empty()) {
    for (size_t group = 0; group < param_group_count(); ++group) initial_lrs_.push_back(lr(group));
  }
  return initial_lrs_;
}

double Optimizer::group_lr(size_t) const { TANDEM_FAIL(who_, " has no learning rate"); }

void Optimizer::set_group_lr(size_t, double) { TANDEM_FAIL(who_, " has no learning rate"); }

std::vector<Tensor> Optimizer::state() const {
  TANDEM_FAIL(who_, "::state: its state has more than one tensor per parameter; use state_dict()");
}

void Optimizer::set_state(const std::vector<Tensor>&) {
  TANDEM_FAIL(who_, "::set_state: its state has more than one tensor per parameter; use load_state_dict()");
}

OptimizerState Optimizer::state_dict() const { return single_slot_state(state(), kLegacySlot); }

void Optimizer::load_state_dict(const OptimizerState& state) { set_state(single_slot_tensors(state, kLegacySlot)); }

OptimizerState Optimizer::single_slot_state(const std::vector<Tensor>& tensors, const char* slot) const {
  OptimizerState state{.kind = who_, .version = 1, .parameters = {}};
  for (const Tensor& tensor : tensors) {
    ParameterState& entry = state.parameters.emplace_back();
    if (tensor.defined()) entry.tensors.emplace_back(slot, tensor);
  }
  return state;
}

std::vector<Tensor> Optimizer::single_slot_tensors(const OptimizerState& state, const char* slot) const {
  check_state_kind(state, 1);
  std::vector<Tensor> tensors(parameters_.size());
  for (size_t i = 0; i < tensors.size(); ++i) {
    for (const auto& [name, tensor] : state.parameters[i].tensors) {
      TANDEM_CHECK(name == slot && !tensors[i].defined(), who_, "::load_state_dict: parameter ", i, " has the slot \"",
                   excerpt(name), "\" but expected at most one \"", slot, "\"");
      check_state_tensor(i, name, tensor);
      tensors[i] = tensor;
    }
  }
  return tensors;
}

void Optimizer::check_state_kind(const OptimizerState& state, int64_t version) const {
  TANDEM_CHECK(state.kind == who_ && state.version == version, who_, "::load_state_dict: got the state of \"",
               excerpt(state.kind), "\" version ", state.version, " but expected \"", who_, "\" version ", version);
  TANDEM_CHECK(state.parameters.size() == parameters_.size(), who_, "::load_state_dict: got the state of ",
               state.parameters.size(), " parameters for ", parameters_.size());
  for (size_t i = 0; i < state.parameters.size(); ++i) {
    TANDEM_CHECK(state.parameters[i].step >= 0 && state.parameters[i].step <= kMaxSteps, who_,
                 "::load_state_dict: parameter ", i, " has step ", state.parameters[i].step,
                 " but expected a count in [0, ", kMaxSteps, "]");
  }
}

void Optimizer::check_state_tensor(size_t parameter, const std::string& slot, const Tensor& tensor) const {
  TANDEM_CHECK(tensor.defined(), who_, "::load_state_dict: ", excerpt(slot), " of parameter ", parameter,
               " is undefined");
  TANDEM_CHECK(tensor.shape() == parameters_[parameter].shape(), who_, "::load_state_dict: ", excerpt(slot),
               " of parameter ", parameter, " has shape ", to_string(tensor.shape()), " but the parameter has shape ",
               to_string(parameters_[parameter].shape()));
  TANDEM_CHECK(tensor.dtype() == parameters_[parameter].dtype(), who_, "::load_state_dict: ", excerpt(slot),
               " of parameter ", parameter, " is ", tensor.dtype(), " but the parameter is ",
               parameters_[parameter].dtype());
}

Tensor Optimizer::copy_for(size_t parameter, const Tensor& value) const {
  NoGradGuard no_grad;
  Tensor copy = Tensor::empty(parameters_[parameter].shape(), parameters_[parameter].device());
  copy.copy_(value);
  return copy;
}

}  // namespace tandem::optim
