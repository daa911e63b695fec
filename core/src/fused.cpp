#include "tandem/core/fused.h"

#include <algorithm>
#include <cmath>
#include <utility>

#include "backend.h"
#include "raw_ops.h"
#include "tandem/core/error.h"

namespace tandem {
namespace {

// Checks that an optimizer's buffer matches its parameter: defined, on its device, of its shape, contiguous.
void check_buffer(const char* caller, const Tensor& param, const Tensor& buffer, const char* name) {
  raw::check_defined(caller, buffer, name);
  raw::check_float32(caller, {param, buffer});
  raw::check_same_device(caller, param, buffer);
  TANDEM_CHECK(buffer.shape() == param.shape() && buffer.is_contiguous(), caller, ": ", name, " has shape ",
               to_string(buffer.shape()), " but expected ", to_string(param.shape()), " (contiguous)");
}

void check_param_and_grad(const char* caller, const Tensor& param, const Tensor& grad) {
  raw::check_defined(caller, param, "param");
  raw::check_defined(caller, grad, "grad");
  raw::check_float32(caller, {param, grad});
  raw::check_same_device(caller, param, grad);
  TANDEM_CHECK(param.shape() == grad.shape(), caller, ": param has shape ", to_string(param.shape()),
               " but grad has shape ", to_string(grad.shape()));
  TANDEM_CHECK(param.is_contiguous() && grad.is_contiguous(), caller, ": param and grad must be contiguous");
}

// One tensor's norm into `out`, a one-element contiguous tensor on its device.
void norm_into(const Tensor& x, double ord, const Tensor& out) {
  backend::for_device(x.device()).vector_norm(raw::contiguous(x), ord, out);
}

// Checks a tensor of hyper-parameters for an update of `param` (Note [Hyper-parameters in device memory]).
void check_hyperparameters(const char* caller, const Tensor& param, const Tensor& values, int64_t count,
                           const char* name) {
  raw::check_defined(caller, values, name);
  raw::check_float32(caller, {param, values});
  raw::check_same_device(caller, param, values);
  TANDEM_CHECK(values.numel() == count && values.is_contiguous(), caller, ": ", name, " has shape ",
               to_string(values.shape()), " but expected ", count, " contiguous elements");
}

void check_sgd_parameter(const SgdParameter& p) {
  check_param_and_grad("sgd_update", p.param, p.grad);
  if (p.update.momentum != 0.0f) check_buffer("sgd_update", p.param, p.momentum_buffer, "momentum_buffer");
  if (p.lr.defined()) check_hyperparameters("sgd_update", p.param, p.lr, 1, "lr");
}

void check_adam_parameter(const AdamParameter& p) {
  check_param_and_grad("adam_update", p.param, p.grad);
  check_buffer("adam_update", p.param, p.exp_avg, "exp_avg");
  check_buffer("adam_update", p.param, p.exp_avg_sq, "exp_avg_sq");
  if (p.update.amsgrad) check_buffer("adam_update", p.param, p.max_exp_avg_sq, "max_exp_avg_sq");
  if (p.step_factors.defined()) check_hyperparameters("adam_update", p.param, p.step_factors, 3, "step_factors");
}

// Checks a list form's entries (Note [Multi-tensor updates]) and runs `run` on the entries of each device, in the order
// of their first entries.
template <typename Entry, typename Run>
void per_device(const std::vector<Entry>& entries, const char* caller, void (*check)(const Entry&), const Run& run) {
  TANDEM_CHECK(!entries.empty(), caller, ": got no parameters but expected at least one");
  for (const Entry& entry : entries) check(entry);
  std::vector<std::pair<Device, std::vector<Entry>>> groups;
  for (const Entry& entry : entries) {
    const Device device = entry.param.device();
    auto group = std::find_if(groups.begin(), groups.end(), [&](const auto& g) { return g.first == device; });
    if (group == groups.end()) group = groups.insert(groups.end(), {device, {}});
    group->second.push_back(entry);
  }
  for (const auto& [device, group] : groups) run(backend::for_device(device), group);
}

// Both forms of sgd_update; `lr` undefined takes update.lr.
void checked_sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdUpdate& update,
                        const Tensor& lr) {
  check_sgd_parameter({param, grad, momentum_buffer, update, lr});
  if (param.numel() == 0) return;
  backend::for_device(param.device()).sgd_update(param, grad, momentum_buffer, update, lr);
}

// Both forms of adam_update; `step_factors` undefined takes update's.
void checked_adam_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                         const Tensor& max_exp_avg_sq, const AdamUpdate& update, const Tensor& step_factors) {
  check_adam_parameter({param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, update, step_factors});
  if (param.numel() == 0) return;
  backend::for_device(param.device())
      .adam_update(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, update, step_factors);
}

}  // namespace

void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdUpdate& update) {
  checked_sgd_update(param, grad, momentum_buffer, update, Tensor());
}

void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdUpdate& update,
                const Tensor& lr) {
  raw::check_defined("sgd_update", lr, "lr");
  checked_sgd_update(param, grad, momentum_buffer, update, lr);
}

void sgd_update(const std::vector<SgdParameter>& parameters, UpdateStream stream) {
  per_device(parameters, "sgd_update", check_sgd_parameter,
             [stream](backend::Backend& backend, const std::vector<SgdParameter>& group) {
               backend.sgd_update(group, stream);
             });
}

void adam_update(const std::vector<AdamParameter>& parameters, UpdateStream stream) {
  per_device(parameters, "adam_update", check_adam_parameter,
             [stream](backend::Backend& backend, const std::vector<AdamParameter>& group) {
               backend.adam_update(group, stream);
             });
}

void adam_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                 const Tensor& max_exp_avg_sq, const AdamUpdate& update) {
  checked_adam_update(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, update, Tensor());
}

void adam_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                 const Tensor& max_exp_avg_sq, const AdamUpdate& update, const Tensor& step_factors) {
  raw::check_defined("adam_update", step_factors, "step_factors");
  checked_adam_update(param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, update, step_factors);
}

Tensor total_norm(const std::vector<Tensor>& tensors, double ord) {
  TANDEM_CHECK(!tensors.empty(), "total_norm: got no tensors");
  TANDEM_CHECK(ord > 0.0, "total_norm: ord must be > 0 (or infinity), got ", ord);
  for (size_t i = 0; i < tensors.size(); ++i) raw::check_defined("total_norm", tensors[i], "a tensor");
  raw::check_float32("total_norm", tensors);
  const Device device = tensors.front().device();
  Tensor norms = Tensor::empty({static_cast<int64_t>(tensors.size())}, device);
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor slot = norms.narrow(0, static_cast<int64_t>(i), 1);
    if (tensors[i].device() == device) {
      norm_into(tensors[i], ord, slot);
    } else {
      Tensor local = Tensor::empty({1}, tensors[i].device());
      norm_into(tensors[i], ord, local);
      raw::copy(local, slot);
    }
  }
  Tensor total = Tensor::empty({}, device);
  norm_into(norms, ord, total);
  return total;
}

void clip_by_norm_(const Tensor& x, const Tensor& norm, float max_norm) {
  raw::check_defined("clip_by_norm_", x, "x");
  raw::check_defined("clip_by_norm_", norm, "norm");
  raw::check_float32("clip_by_norm_", {x, norm});
  raw::check_same_device("clip_by_norm_", x, norm);
  TANDEM_CHECK(norm.numel() == 1, "clip_by_norm_: norm has shape ", to_string(norm.shape()),
               " but expected one element");
  if (x.numel() == 0) return;
  Tensor target = raw::contiguous(x);
  backend::for_device(x.device()).clip_by_norm(target, raw::contiguous(norm), max_norm);
  if (!target.is_same(x)) raw::copy(target, x);
}

}  // namespace tandem
