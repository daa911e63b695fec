#pragma once
// The CPU backend's fused attention (Backend::attention_forward / attention_backward): the definition computed row by
// row in double from the operands' values, the reference that the CUDA kernels and gradcheck are compared with.

#include "backend.h"

namespace tandem::cpu {

using backend::AttentionCall;

void attention_forward(const AttentionCall& call, const Tensor& out, const Tensor& lse);
void attention_backward(const AttentionCall& call, const Tensor& out, const Tensor& grad_out, const Tensor& lse,
                        const Tensor& grad_q, const Tensor& grad_k, const Tensor& grad_v);

}  // namespace tandem::cpu
