#pragma once
// Host launchers of the CUDA backend's fused optimizer updates (optimizer_updates.cu): SGD and Adam/AdamW, one tensor
// per launch or a list of tensors in one launch. They take raw device pointers and the stream to launch on; the
// caller has already checked the tensors and set the current device. Each launcher returns at once on empty work and
// checks its launches (throws tandem::Error).

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "tandem/core/fused.h"

namespace tandem::cuda::kernels {

// One step of torch.optim.SGD's rule (fused.h); momentum_buffer is read and written only when momentum != 0.
// lr_on_device: null, or the learning rate in device memory, read in place of update.lr when the kernel runs.
void sgd_update(float* param, const float* grad, float* momentum_buffer, int64_t n, const SgdUpdate& update,
                const float* lr_on_device, cudaStream_t stream);
// One step of torch.optim.Adam's / AdamW's rule (fused.h); max_exp_avg_sq is read and written only when
// update.amsgrad. step_factors: null, or param_scale, step_size and bias_correction2_sqrt in device memory, read in
// place of update's when the kernel runs.
void adam_update(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, float* max_exp_avg_sq, int64_t n,
                 const AdamUpdate& update, const float* step_factors, cudaStream_t stream);
// The multi-tensor forms (Note [Multi-tensor updates] in fused.h): each entry is one call of the launcher above,
// entries without elements are skipped, and the whole list takes one launch (a few for a very long list). Bitwise the
// results of one single-tensor launch per entry.
struct SgdEntry {
  float* param;
  const float* grad;
  float* momentum_buffer;  // read and written only when update.momentum != 0
  const float* lr;         // null: update.lr
  int64_t n;
  SgdUpdate update;
};
void sgd_update(const std::vector<SgdEntry>& entries, cudaStream_t stream);
struct AdamEntry {
  float* param;
  const float* grad;
  float* exp_avg;
  float* exp_avg_sq;
  float* max_exp_avg_sq;      // null unless update.amsgrad
  const float* step_factors;  // null: update's factors
  int64_t n;
  AdamUpdate update;
};
void adam_update(const std::vector<AdamEntry>& entries, cudaStream_t stream);

}  // namespace tandem::cuda::kernels
