#include "tandem/optim/sgd.h"

#include "tandem/core/error.h"
#include "tandem/core/fused.h"
#include "tandem/core/grad_mode.h"
#include "tandem/core/shape.h"

namespace tandem::optim {
namespace {

constexpr const char* kMomentumSlot = "momentum_buffer";

void check_options(const SGDOptions& options) {
  TANDEM_CHECK(options.lr >= 0.0, "optim::SGD: lr must be >= 0, got ", options.lr);
  TANDEM_CHECK(options.momentum >= 0.0, "optim::SGD: momentum must be >= 0, got ", options.momentum);
  TANDEM_CHECK(options.weight_decay >= 0.0, "optim::SGD: weight_decay must be >= 0, got ", options.weight_decay);
  TANDEM_CHECK(!options.nesterov || (options.momentum > 0.0 && options.dampening == 0.0),
               "optim::SGD: nesterov momentum needs momentum > 0 and dampening == 0, got momentum ",
               options.momentum, " and dampening ", options.dampening);
}

}  // namespace

SGD::SGD(std::vector<Tensor> parameters, SGDOptions options)
    : SGD(std::vector<ParamGroup<SGDOptions>>{{.parameters = std::move(parameters), .options = {}}}, options) {}

SGD::SGD(std::vector<ParamGroup<SGDOptions>> groups, SGDOptions defaults)
    : Optimizer(parameters_of(groups), "optim::SGD"),
      momentum_buffers_(parameters().size()),
      groups_(options_of(groups, defaults)) {
  for (const SGDOptions& options : groups_) check_options(options);
}

const SGDOptions& SGD::options(size_t group) const {
  check_group(group, "options");
  return groups_[group];
}

SgdUpdate SGD::update_of(size_t parameter, bool first_step) const {
  const SGDOptions& options = groups_[param_group_of(parameter)];
  return SgdUpdate{.lr = static_cast<float>(options.lr),
                   .momentum = static_cast<float>(options.momentum),
                   .dampening = static_cast<float>(options.dampening),
                   .weight_decay = static_cast<float>(options.weight_decay),
                   .nesterov = options.nesterov,
                   .first_step = first_step};
}

// Both steps update every parameter of a device in one launch (Note [Multi-tensor updates] in fused.h).
void SGD::step() {
  NoGradGuard no_grad;
  std::vector<SgdParameter> updates;
  for (size_t i = 0; i < parameters().size(); ++i) {
    const Tensor& parameter = parameters()[i];
    Tensor grad = parameter.grad();
    if (!grad.defined()) continue;
    Tensor& buffer = momentum_buffers_[i];
    const SgdUpdate update = update_of(i, !buffer.defined());
    // The first step writes buf = d, so the new buffer needs no initial values.
    if (update.momentum != 0.0f && update.first_step) {
      buffer = Tensor::empty(parameter.shape(), parameter.device());
      state_replaced();
    }
    updates.push_back({parameter, grad.contiguous(), buffer, update, Tensor()});
  }
  if (!updates.empty()) sgd_update(updates);
}

void SGD::prepare_replay() {
  std::vector<float> lrs(parameters().size());
  for (size_t i = 0; i < lrs.size(); ++i) lrs[i] = static_cast<float>(groups_[param_group_of(i)].lr);
  upload_replay_values(lrs, 1);
}

void SGD::replayable_step() {
  NoGradGuard no_grad;
  std::vector<SgdParameter> updates;
  for (size_t i = 0; i < parameters().size(); ++i) {
    const Tensor& parameter = parameters()[i];
    const Tensor grad = parameter.grad();
    if (!grad.defined()) continue;
    const Tensor lr = replay_values(i, "replayable_step");
    const Tensor& buffer = momentum_buffers_[i];
    TANDEM_CHECK(groups_[param_group_of(i)].momentum == 0.0 || buffer.defined(),
                 "optim::SGD::replayable_step: parameter ", i,
                 " has no momentum buffer yet but expected one (take one step() before capturing)");
    SgdUpdate update = update_of(i, /*first_step=*/false);
    update.lr = 0.0f;  // read from the device (Note [Replayed optimizer steps])
    updates.push_back({parameter, grad.contiguous(), buffer, update, lr});
  }
  if (!updates.empty()) sgd_update(updates);
}

void SGD::set_momentum_buffers(const std::vector<Tensor>& buffers) {
  TANDEM_CHECK(buffers.size() == parameters().size(), "optim::SGD::set_momentum_buffers: got ", buffers.size(),
               " buffers for ", parameters().size(), " parameters");
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (!buffers[i].defined()) continue;
    TANDEM_CHECK(buffers[i].shape() == parameters()[i].shape(), "optim::SGD::set_momentum_buffers: buffer ", i,
                 " has shape ", to_string(buffers[i].shape()), " but parameter ", i, " has shape ",
                 to_string(parameters()[i].shape()));
  }
  for (size_t i = 0; i < buffers.size(); ++i) {
    momentum_buffers_[i] = buffers[i].defined() ? copy_for(i, buffers[i]) : Tensor();
  }
  state_replaced();
}

OptimizerState SGD::state_dict() const { return single_slot_state(momentum_buffers_, kMomentumSlot); }

void SGD::load_state_dict(const OptimizerState& state) {
  set_momentum_buffers(single_slot_tensors(state, kMomentumSlot));
}

}  // namespace tandem::optim
