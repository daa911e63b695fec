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
               "optim::SGD: nesterov momentum needs momentum > 0 and dampening == 0, got momentum ", options.momentum,
               " and dampening ", options.dampening);
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

// Both steps update every parameter of a device in one launch (Note [Multi-tensor updates] in fused.h); a part of a
// step updates those of `indices` (Note [Stepping parameters apart] in optimizer.h).
void SGD::step_part(const std::vector<size_t>& indices, UpdateStream stream, bool replayable) {
  NoGradGuard no_grad;
  const char* caller = replayable ? "replayable_step" : "step";
  std::vector<SgdParameter> updates;
  for (const size_t i : indices) {
    const Tensor& parameter = parameters()[i];
    const Tensor grad = parameter.grad();
    if (!grad.defined()) continue;
    const Tensor lr = replayable ? replay_values(i, caller) : Tensor();  // Note [Replayed optimizer steps]
    Tensor& buffer = momentum_buffers_[i];
    const bool first_step = !buffer.defined();
    if (first_step && groups_[param_group_of(i)].momentum != 0.0) {
      TANDEM_CHECK(!replayable, "optim::SGD::", caller, ": parameter ", i,
                   " has no momentum buffer yet but expected one (take one step() before capturing)");
      TANDEM_CHECK(stream == UpdateStream::Compute, "optim::SGD::", caller, ": parameter ", i,
                   " has no momentum buffer yet, which is created on the compute stream, but the update was asked "
                   "to run on the communication stream; take its first step on the compute stream");
      // The first step writes buf = d, so the new buffer needs no initial values.
      buffer = Tensor::empty(parameter.shape(), parameter.device());
      state_replaced();
    }
    SgdUpdate update = update_of(i, /*first_step=*/!replayable && first_step);
    if (replayable) update.lr = 0.0f;  // read from the device
    updates.push_back({parameter, grad.contiguous(), buffer, update, lr});
  }
  if (!updates.empty()) sgd_update(updates, stream);
}

bool SGD::part_creates_state(const std::vector<size_t>& indices) const {
  for (const size_t i : indices) {
    if (groups_[param_group_of(i)].momentum != 0.0 && !momentum_buffers_[i].defined() && has_grad(i)) return true;
  }
  return false;
}

void SGD::prepare_replay() {
  check_gradients("prepare_replay");
  std::vector<float> lrs(parameters().size());
  for (size_t i = 0; i < lrs.size(); ++i) lrs[i] = static_cast<float>(groups_[param_group_of(i)].lr);
  upload_replay_values(lrs, 1);
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
