#pragma once
// The CPU backend's layer normalization (Backend::layer_norm_forward / layer_norm_backward): row by row, the
// statistics and the row sums of the backward accumulated in double.

#include "backend.h"

namespace tandem::cpu {

using backend::LayerNormCall;

void layer_norm_forward(const LayerNormCall& call, const Tensor& out, const Tensor& mean, const Tensor& rstd);
void layer_norm_backward(const LayerNormCall& call, const Tensor& grad_out, const Tensor& mean, const Tensor& rstd,
                         const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias);

}  // namespace tandem::cpu
