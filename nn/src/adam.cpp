#include "tandem/optim/adam.h"

#include <cmath>
#include <string>

#include "tandem/core/error.h"
#include "tandem/core/fused.h"
#include "tandem/core/grad_mode.h"
#include "tandem/core/ops.h"

namespace tandem::optim {
namespace {

constexpr const char* kExpAvg = "exp_avg";
constexpr const char* kExpAvgSq = "exp_avg_sq";
constexpr const char* kMaxExpAvgSq = "max_exp_avg_sq";

template <bool kDecoupled>
constexpr const char* name_of() {
  return kDecoupled ? "optim::AdamW" : "optim::Adam";
}

template <bool kDecoupled>
void check_options(const AdamFamilyOptions<kDecoupled>& options) {
  const char* who = name_of<kDecoupled>();
  TANDEM_CHECK(options.lr >= 0.0, who, ": lr must be >= 0, got ", options.lr);
  TANDEM_CHECK(options.eps >= 0.0, who, ": eps must be >= 0, got ", options.eps);
  for (size_t i = 0; i < 2; ++i) {
    TANDEM_CHECK(options.betas[i] >= 0.0 && options.betas[i] < 1.0, who, ": betas[", i, "] must be in [0, 1), got ",
                 options.betas[i]);
  }
  TANDEM_CHECK(options.weight_decay >= 0.0, who, ": weight_decay must be >= 0, got ", options.weight_decay);
}

// The scalars of one parameter's update at step t (Note [Adam and AdamW] in adam.h; fused.h's AdamUpdate), formed
// in double as PyTorch forms them in Python, then rounded to float32 as its kernels round them.
template <bool kDecoupled>
AdamUpdate update_at(const AdamFamilyOptions<kDecoupled>& o, int64_t t) {
  const double bias_correction1 = 1.0 - std::pow(o.betas[0], static_cast<double>(t));
  const double bias_correction2 = 1.0 - std::pow(o.betas[1], static_cast<double>(t));
  return AdamUpdate{.param_scale = kDecoupled ? static_cast<float>(1.0 - o.lr * o.weight_decay) : 1.0f,
                    .weight_decay = kDecoupled ? 0.0f : static_cast<float>(o.weight_decay),
                    .one_minus_beta1 = static_cast<float>(1.0 - o.betas[0]),
                    .beta2 = static_cast<float>(o.betas[1]),
                    .one_minus_beta2 = static_cast<float>(1.0 - o.betas[1]),
                    .eps = static_cast<float>(o.eps),
                    .step_size = static_cast<float>(o.lr / bias_correction1),
                    .bias_correction2_sqrt = static_cast<float>(std::sqrt(bias_correction2)),
                    .amsgrad = o.amsgrad};
}

}  // namespace

template <bool kDecoupled>
AdamFamily<kDecoupled>::AdamFamily(std::vector<Tensor> parameters, Options options)
    : AdamFamily(std::vector<ParamGroup<Options>>{{.parameters = std::move(parameters), .options = {}}}, options) {}

template <bool kDecoupled>
AdamFamily<kDecoupled>::AdamFamily(std::vector<ParamGroup<Options>> groups, Options defaults)
    : Optimizer(parameters_of(groups), name_of<kDecoupled>()),
      groups_(options_of(groups, defaults)),
      moments_(parameters().size()) {
  for (const Options& options : groups_) check_options(options);
}

template <bool kDecoupled>
const typename AdamFamily<kDecoupled>::Options& AdamFamily<kDecoupled>::options(size_t group) const {
  check_group(group, "options");
  return groups_[group];
}

template <bool kDecoupled>
int64_t AdamFamily<kDecoupled>::step_count(size_t parameter) const {
  TANDEM_CHECK(parameter < moments_.size(), who(), "::step_count: parameter ", parameter, " but there are ",
               moments_.size());
  return moments_[parameter].step;
}

// Both steps update every parameter of a device in one launch (Note [Multi-tensor updates] in fused.h); a part of a
// step updates those of `indices` (Note [Stepping parameters apart] in optimizer.h).
template <bool kDecoupled>
void AdamFamily<kDecoupled>::step_part(const std::vector<size_t>& indices, UpdateStream stream, bool replayable) {
  NoGradGuard no_grad;
  std::vector<AdamParameter> updates;
  for (const size_t i : indices) {
    const Tensor& parameter = parameters()[i];
    const Tensor grad = parameter.grad();
    if (!grad.defined()) continue;
    // A replayed step reads the step-dependent factors from the device (Note [Replayed optimizer steps]) and counts
    // its steps in finish_replay().
    const Tensor factors = replayable ? replay_values(i, "replayable_step") : Tensor();
    const Options& options = groups_[param_group_of(i)];
    Moments& m = moments_[i];
    if (m.step == 0) {
      TANDEM_CHECK(!replayable, who(), "::replayable_step: parameter ", i,
                   " has no moments yet but expected them (take one step() before capturing)");
      TANDEM_CHECK(stream == UpdateStream::Compute, who(), "::step: parameter ", i,
                   " has no moments yet, which are created on the compute stream, but the update was asked to run "
                   "on the communication stream; take its first step on the compute stream");
      m.exp_avg = Tensor::zeros(parameter.shape(), parameter.device());
      m.exp_avg_sq = Tensor::zeros(parameter.shape(), parameter.device());
      if (options.amsgrad) m.max_exp_avg_sq = Tensor::zeros(parameter.shape(), parameter.device());
      state_replaced();
    }
    updates.push_back({parameter, grad.contiguous(), m.exp_avg, m.exp_avg_sq, m.max_exp_avg_sq,
                       update_at(options, m.step + 1), factors});
    if (!replayable) ++m.step;
  }
  if (!updates.empty()) adam_update(updates, stream);
}

template <bool kDecoupled>
bool AdamFamily<kDecoupled>::part_creates_state(const std::vector<size_t>& indices) const {
  for (const size_t i : indices) {
    if (moments_[i].step == 0 && has_grad(i)) return true;
  }
  return false;
}

template <bool kDecoupled>
void AdamFamily<kDecoupled>::prepare_replay() {
  check_gradients("prepare_replay");
  std::vector<float> factors;
  factors.reserve(3 * parameters().size());
  for (size_t i = 0; i < parameters().size(); ++i) {
    const AdamUpdate update = update_at(groups_[param_group_of(i)], moments_[i].step + 1);
    factors.insert(factors.end(), {update.param_scale, update.step_size, update.bias_correction2_sqrt});
  }
  upload_replay_values(factors, 3);
}

template <bool kDecoupled>
void AdamFamily<kDecoupled>::finish_replay() {
  for (size_t i = 0; i < parameters().size(); ++i) {
    if (parameters()[i].grad().defined()) ++moments_[i].step;
  }
}

template <bool kDecoupled>
OptimizerState AdamFamily<kDecoupled>::state_dict() const {
  OptimizerState state{.kind = who(), .version = 1, .parameters = {}};
  for (const Moments& m : moments_) {
    ParameterState& entry = state.parameters.emplace_back();
    entry.step = m.step;
    if (m.step == 0) continue;
    entry.tensors = {{kExpAvg, m.exp_avg}, {kExpAvgSq, m.exp_avg_sq}};
    if (m.max_exp_avg_sq.defined()) entry.tensors.emplace_back(kMaxExpAvgSq, m.max_exp_avg_sq);
  }
  return state;
}

template <bool kDecoupled>
void AdamFamily<kDecoupled>::load_state_dict(const OptimizerState& state) {
  check_state_kind(state, 1);
  // Every entry is checked before the first buffer is replaced: a refused state changes nothing.
  std::vector<Moments> loaded(parameters().size());
  for (size_t i = 0; i < loaded.size(); ++i) {
    const ParameterState& entry = state.parameters[i];
    const bool amsgrad = groups_[param_group_of(i)].amsgrad;
    const bool stepped = entry.step > 0;
    const std::string expected = !stepped  ? "none (step 0)"
                                 : amsgrad ? "exp_avg, exp_avg_sq and max_exp_avg_sq (amsgrad)"
                                           : "exp_avg and exp_avg_sq";
    Moments& m = loaded[i];
    m.step = entry.step;
    for (const auto& [slot, tensor] : entry.tensors) {
      Tensor* target = !stepped                          ? nullptr
                       : slot == kExpAvg                 ? &m.exp_avg
                       : slot == kExpAvgSq               ? &m.exp_avg_sq
                       : slot == kMaxExpAvgSq && amsgrad ? &m.max_exp_avg_sq
                                                         : nullptr;
      TANDEM_CHECK(target != nullptr && !target->defined(), who(), "::load_state_dict: parameter ", i,
                   " has the slot \"", excerpt(slot), "\" but expected the slots ", expected);
      check_state_tensor(i, slot, tensor);
      if (target != &m.exp_avg && tensor.numel() > 0) {
        // Running averages of squared gradients: a negative or NaN value can only come from a damaged file.
        const double least = tandem::min(tensor.to(DType::Float32)).item();
        TANDEM_CHECK(least >= 0.0, who(), "::load_state_dict: ", excerpt(slot), " of parameter ", i, " holds ", least,
                     " but expected values >= 0 (an average of squared gradients)");
      }
      *target = tensor;
    }
    const bool complete =
        !stepped || (m.exp_avg.defined() && m.exp_avg_sq.defined() && (!amsgrad || m.max_exp_avg_sq.defined()));
    TANDEM_CHECK(complete, who(), "::load_state_dict: parameter ", i, " has step ", entry.step,
                 " but not all of the slots ", expected);
  }
  for (size_t i = 0; i < loaded.size(); ++i) {
    Moments& m = loaded[i];
    if (m.step > 0) {
      m.exp_avg = copy_for(i, m.exp_avg);
      m.exp_avg_sq = copy_for(i, m.exp_avg_sq);
      if (m.max_exp_avg_sq.defined()) m.max_exp_avg_sq = copy_for(i, m.max_exp_avg_sq);
    }
  }
  moments_ = std::move(loaded);
  state_replaced();
}

template class AdamFamily<false>;
template class AdamFamily<true>;

}  // namespace tandem::optim
