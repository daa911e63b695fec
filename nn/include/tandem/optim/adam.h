#pragma once
// optim::Adam and optim::AdamW, exactly as torch.optim.Adam and torch.optim.AdamW. For each parameter with a
// gradient, at its own step count t (counting only the steps where it had a gradient):
//   AdamW: param *= 1 - lr * weight_decay                      (decoupled weight decay)
//   Adam:  g = grad + weight_decay * param                       (L2 penalty; AdamW: g = grad)
//   exp_avg = beta1 * exp_avg + (1 - beta1) * g
//   exp_avg_sq = beta2 * exp_avg_sq + (1 - beta2) * g^2
//   amsgrad: max_exp_avg_sq = max(max_exp_avg_sq, exp_avg_sq), used below in place of exp_avg_sq
//   param -= lr / (1 - beta1^t) * exp_avg / (sqrt(exp_avg_sq) / sqrt(1 - beta2^t) + eps)
// The moments start at zero. Each parameter is updated by one fused in-place kernel (tandem::adam_update, whose
// float32 operations follow PyTorch's order); step() never waits for the device.
//
//   optim::AdamW adamw(net->parameters(), {.lr = 3e-4, .weight_decay = 0.05});
//   optim::Adam adam({{.parameters = body}, {.parameters = head, .options = optim::AdamOptions{.lr = 1e-2}}}, {});

#include <array>
#include <cstdint>
#include <initializer_list>
#include <vector>

#include "tandem/core/tensor.h"
#include "tandem/optim/optimizer.h"

namespace tandem::optim {

// Note [Adam and AdamW]: the two differ only in where weight decay goes and in its default (0 and 1e-2, as in
// PyTorch), so they are one class template over that choice, and their options one struct template whose only
// difference is that default. Adam and AdamW are distinct types: one's options cannot be passed to the other.
template <bool kDecoupledWeightDecay>
struct AdamFamilyOptions {
  double lr = 1e-3;
  std::array<double, 2> betas = {0.9, 0.999};
  double eps = 1e-8;
  double weight_decay = kDecoupledWeightDecay ? 1e-2 : 0.0;
  bool amsgrad = false;
};
using AdamOptions = AdamFamilyOptions<false>;
using AdamWOptions = AdamFamilyOptions<true>;

template <bool kDecoupledWeightDecay>
class AdamFamily : public Optimizer {
 public:
  using Options = AdamFamilyOptions<kDecoupledWeightDecay>;

  // parameters: defined leaf tensors, no duplicates, not empty. Options are validated as PyTorch does: lr >= 0,
  // eps >= 0, 0 <= betas[i] < 1, weight_decay >= 0 (NaN fails every one).
  explicit AdamFamily(std::vector<Tensor> parameters, Options options = {});
  // Parameter groups (see ParamGroup), each with its own options or `defaults`; every group's options validated.
  AdamFamily(std::vector<ParamGroup<Options>> groups, Options defaults);
  // The same for a braced list of groups (which also makes Adam({}, options) mean no groups, unambiguously).
  AdamFamily(std::initializer_list<ParamGroup<Options>> groups, Options defaults)
      : AdamFamily(std::vector<ParamGroup<Options>>(groups), defaults) {}

  void step() override {
    check_gradients("step");
    step_part(every_index(), UpdateStream::Compute, /*replayable=*/false);
  }
  // Each parameter's update depends on nothing else (Note [Stepping parameters apart] in optimizer.h).
  bool steps_parameters_apart() const override { return true; }

  // Group `group`'s options, with the lr set_lr last set. Errors: no such group.
  const Options& options(size_t group = 0) const;
  // Steps applied to parameters()[parameter] (0 until its first gradient). Errors: no such parameter.
  int64_t step_count(size_t parameter) const;

  // The state by name (optimizer_state.h): kind "optim::Adam" or "optim::AdamW", version 1; per parameter its step
  // count and, once it has one, the slots "exp_avg", "exp_avg_sq" and (amsgrad groups) "max_exp_avg_sq", as in
  // PyTorch's state_dict. These are the live buffers: step() updates them in place.
  OptimizerState state_dict() const override;
  // Besides Optimizer::load_state_dict's errors: a parameter with a step count but not exactly its group's slots,
  // or slots without a step count.
  void load_state_dict(const OptimizerState& state) override;

  // Note [Replayed optimizer steps] in optimizer.h: the factors that depend on the learning rate and the step count
  // come from device memory, and finish_replay() counts the step of every parameter that has a gradient.
  bool replayable() const override { return true; }
  void prepare_replay() override;
  void replayable_step() override { step_part(every_index(), UpdateStream::Compute, /*replayable=*/true); }
  void finish_replay() override;

 private:
  struct Moments {
    int64_t step = 0;
    Tensor exp_avg;
    Tensor exp_avg_sq;
    Tensor max_exp_avg_sq;  // amsgrad only
  };

  // step() and replayable_step() over `indices`, and whether that would create moments.
  void step_part(const std::vector<size_t>& indices, UpdateStream stream, bool replayable) override;
  bool part_creates_state(const std::vector<size_t>& indices) const override;
  double group_lr(size_t group) const override { return groups_[group].lr; }
  void set_group_lr(size_t group, double lr) override { groups_[group].lr = lr; }

  std::vector<Options> groups_;
  std::vector<Moments> moments_;  // one per parameter
};

using Adam = AdamFamily<false>;
using AdamW = AdamFamily<true>;
extern template class AdamFamily<false>;
extern template class AdamFamily<true>;

}  // namespace tandem::optim
