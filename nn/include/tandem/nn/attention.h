#pragma once
// Attention: torch.nn.functional.scaled_dot_product_attention's semantics and shapes.

#include <optional>

#include "tandem/core/tensor.h"

namespace tandem::nn {

// softmax(query @ key^T * scale + bias) @ value, with query [..., L, E], key [..., S, E] and value [..., S, Ev]
// (batch dims broadcast as matmul's) giving [..., L, Ev]; scale defaults to 1 / sqrt(E). The bias comes from
// attn_mask, broadcast to [..., L, S]: an int64 mask is PyTorch's boolean one (nonzero: the position takes part,
// zero: it is left out, -inf), a float32 mask is added as it is; or from is_causal, which leaves out every key after
// the query's position (the lower triangle of an [L, S] matrix of ones, aligned at the top left, as PyTorch). A row
// that leaves out every key is NaN, as in PyTorch. With dropout_p > 0 the attention weights go through
// nn::dropout(weights, dropout_p) (always, as the functional form in PyTorch: pass 0 in eval).
// Without a mask, for float32 inputs with one head dim of 32, 64 or 128 and equal batch dims, this is fused_attention
// (ops.h) in default_precision() with the same dropout (the same mask from the same generator values), on every
// device, unless set_fused_attention_enabled(false) (matmul_settings.h). Otherwise it is the reference path: the
// scores [..., L, S] are materialized. Differentiable in
// query, key, value and a float32 mask.
// Errors: undefined or fewer than 2-D inputs, on different devices or not float32; E or S that differ between the
// inputs; a mask together with is_causal; a mask that is neither int64 nor float32 or does not broadcast to the
// scores; dropout_p outside [0, 1); a scale that is not finite.
Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask = {}, double dropout_p = 0.0, bool is_causal = false,
                                    std::optional<double> scale = std::nullopt);

}  // namespace tandem::nn
