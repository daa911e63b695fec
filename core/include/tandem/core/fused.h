#pragma once
// Fused, non-differentiable kernels of the optimizers and of gradient clipping: in-place updates (one kernel per
// parameter, or per device for a list of parameters) and norms, computed on the tensors' device without waiting for it.

#include <vector>

#include "tandem/core/tensor.h"

namespace tandem {

// torch.optim.SGD's rule for one parameter:
//   d = grad + weight_decay * param
//   buf = first_step ? d : momentum * buf + (1 - dampening) * d      (only when momentum != 0)
//   d = nesterov ? d + momentum * buf : buf                           (only when momentum != 0)
//   param -= lr * d
struct SgdUpdate {
  float lr = 0.01f;
  float momentum = 0.0f;
  float dampening = 0.0f;
  float weight_decay = 0.0f;
  bool nesterov = false;
  bool first_step = true;
};

// param, grad and (when momentum != 0) momentum_buffer: contiguous, equal shapes, one device. Never recorded.
void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdUpdate& update);

// Note [Hyper-parameters in device memory]: a captured CUDA graph replays its kernels with the arguments they were
// captured with, so a learning rate passed as a kernel argument would stay the captured step's for every replay. The
// forms below read the values that change from step to step from a small tensor on the parameter's device when the
// update runs (on a CPU device: when the call runs), and take everything else from `update`. Given the same values,
// they compute exactly what the plain forms compute. Whoever owns the tensor refreshes it, in stream order, before
// each update (optim::SGD and optim::Adam do, for their replayed steps: optimizer.h).
// lr: one float32 element on param's device, used in place of update.lr. Errors: as above; lr undefined, on another
// device, not float32 or not one element.
void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdUpdate& update,
                const Tensor& lr);

// One parameter's part of a multi-tensor SGD update: the tensors and arguments of one sgd_update call (lr undefined:
// update.lr).
struct SgdParameter {
  Tensor param;
  Tensor grad;
  Tensor momentum_buffer;
  SgdUpdate update;
  Tensor lr;
};

// Where the list forms run their kernels on a GPU (Note [Updates on the communication stream]).
enum class UpdateStream { Compute, Communication };

// Note [Multi-tensor updates]: the list forms apply the single-tensor rule to every entry, with exactly the same
// arithmetic (bitwise equal results), but launch one kernel per device for a whole list on GPUs (a list longer than a
// kernel's arguments hold takes a few), so that an optimizer's step over every parameter of a device costs one launch,
// and one node of a captured graph, instead of one per parameter. Entries may live on several devices; no two may
// share a tensor that either writes. Errors: an empty list; each entry's errors as the single-tensor form's (lr
// checked as there when defined).
//
// Note [Updates on the communication stream]: with UpdateStream::Communication the kernels run on each device's
// communication stream (Note [Streams] in tandem/core/cuda/context.h) instead of its compute stream: after whatever
// was issued there before them (a gradient bucket's all-reduce, comm::all_reduce_async) and beside the work of the
// compute stream. Nothing orders them after the compute stream's work, nor its later work after them: the caller
// does, and it must ensure that the compute stream neither reads nor writes the entries' tensors until that stream is
// joined back (parallel's optimizer steps in backward do: Note [Optimizer steps in backward] in
// parallel/steps_in_backward.h). Nothing is allocated. On CPU devices work finishes within the call, and the choice
// changes nothing.
void sgd_update(const std::vector<SgdParameter>& parameters, UpdateStream stream = UpdateStream::Compute);

// torch.optim.Adam's and AdamW's rule for one parameter at its step t, in float32 with every operation in the order
// PyTorch's single-tensor implementation takes (so CPU and CUDA agree bitwise):
//   param = param * param_scale                                   (AdamW's decoupled decay, 1 - lr * weight_decay)
//   g = grad + weight_decay * param                               (Adam's L2 term; skipped when 0)
//   exp_avg = lerp(exp_avg, g, one_minus_beta1)                   (torch.lerp's two forms, by |weight| < 0.5)
//   exp_avg_sq = exp_avg_sq * beta2 + one_minus_beta2 * g * g
//   max_exp_avg_sq = maximum(max_exp_avg_sq, exp_avg_sq)          (amsgrad only; it then stands for exp_avg_sq below)
//   param = param + (-step_size * exp_avg) / (sqrt(exp_avg_sq) / bias_correction2_sqrt + eps)
// The factors that depend on the step are formed by the caller in double: step_size = lr / (1 - beta1^t) and
// bias_correction2_sqrt = sqrt(1 - beta2^t).
struct AdamUpdate {
  float param_scale = 1.0f;
  float weight_decay = 0.0f;
  float one_minus_beta1 = 0.1f;
  float beta2 = 0.999f;
  float one_minus_beta2 = 0.001f;
  float eps = 1e-8f;
  float step_size = 1e-3f;
  float bias_correction2_sqrt = 1.0f;
  bool amsgrad = false;
};

// param, grad, exp_avg, exp_avg_sq and (when amsgrad) max_exp_avg_sq: contiguous, equal shapes, one device; the
// last three are updated in place. Never recorded.
void adam_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                 const Tensor& max_exp_avg_sq, const AdamUpdate& update);
// The same with the factors that depend on the step and the learning rate in device memory (Note [Hyper-parameters
// in device memory]): step_factors holds param_scale, step_size and bias_correction2_sqrt, in that order (three
// contiguous float32 elements on param's device), used in place of update's. Errors: as above; step_factors
// undefined, on another device, not float32, not contiguous or not three elements.
void adam_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                 const Tensor& max_exp_avg_sq, const AdamUpdate& update, const Tensor& step_factors);

// One parameter's part of a multi-tensor Adam update (Note [Multi-tensor updates]): the tensors and arguments of one
// adam_update call (step_factors undefined: update's factors).
struct AdamParameter {
  Tensor param;
  Tensor grad;
  Tensor exp_avg;
  Tensor exp_avg_sq;
  Tensor max_exp_avg_sq;
  AdamUpdate update;
  Tensor step_factors;
};

// adam_update of every entry, as few launches as the list form of sgd_update (Note [Multi-tensor updates]), on
// `stream` as there. Errors: as that form's.
void adam_update(const std::vector<AdamParameter>& parameters, UpdateStream stream = UpdateStream::Compute);

// The `ord`-norm of all the tensors' elements taken together, computed as torch.nn.utils.clip_grad_norm_ does: the
// norm of the vector of each tensor's norm, where a tensor's norm is (sum |x|^ord)^(1/ord), or max |x| for
// ord = +infinity (NaN elements make it NaN). The result has shape {} and lives on tensors[0]'s device; tensors may
// live on several devices (their norms are copied there). Nothing waits for a device. Never recorded.
// Errors: no tensors, an undefined one, ord not > 0 (NaN included).
Tensor total_norm(const std::vector<Tensor>& tensors, double ord);

// x *= min(max_norm / (norm + 1e-6), 1), where norm is a one-element tensor on x's device that is read there (no
// host round trip): clip_grad_norm_'s scaling of one gradient, all in float32 (a NaN norm makes x NaN, as in
// PyTorch). Any strides. Never recorded. Errors: undefined tensors, norm not one element or on another device.
void clip_by_norm_(const Tensor& x, const Tensor& norm, float max_norm);

}  // namespace tandem
