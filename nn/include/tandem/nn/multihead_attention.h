#pragma once
// nn::MultiheadAttention: torch.nn.MultiheadAttention's parameters, names and layouts, so that a PyTorch state_dict
// loads (in_proj_weight [3E, E] holding the query, key and value projections in that order, in_proj_bias [3E],
// out_proj.weight [E, E], out_proj.bias [E]), and its computation: the three projections, num_heads heads of
// E / num_heads dims each through nn::scaled_dot_product_attention, the heads joined and projected by out_proj.
//
//   nn::MultiheadAttention attention(512, 8, {.dropout = 0.1});
//   Tensor y = attention.forward(x);                                   // self-attention, x [N, L, 512]
//   Tensor z = attention.forward(x, memory, memory, {.key_padding_mask = padding});

#include <cstdint>
#include <memory>
#include <string>

#include "tandem/nn/linear.h"
#include "tandem/nn/module.h"

namespace tandem::nn {

struct MultiheadAttentionOptions {
  double dropout = 0.0;     // on the attention weights, while training
  bool bias = true;         // in_proj_bias and out_proj.bias
  bool batch_first = true;  // inputs [N, L, E]; false: [L, N, E] (PyTorch's default is false)
};

// The masks of one call, with PyTorch's conventions for this module: an int64 mask is boolean with nonzero meaning
// "left out" (the opposite of scaled_dot_product_attention's), a float32 mask is added to the scores.
struct AttentionMasks {
  Tensor key_padding_mask;  // [N, S]: keys of each batch entry left out (padding)
  Tensor attn_mask;         // [L, S] or [N * num_heads, L, S]
  bool is_causal = false;   // without attn_mask: every key after the query's position left out; with one: a hint
};

class MultiheadAttention : public Cloneable<MultiheadAttention> {
 public:
  // Initialized as PyTorch's: in_proj_weight Xavier-uniform, the biases 0, out_proj.weight as nn::Linear's.
  // Errors: embed_dim or num_heads < 1; embed_dim not divisible by num_heads; dropout outside [0, 1).
  MultiheadAttention(int64_t embed_dim, int64_t num_heads, MultiheadAttentionOptions options = {});

  // Self-attention: forward(input, input, input).
  Tensor forward(const Tensor& input) override;
  // query [N, L, E], key and value [N, S, E] ([L, N, E] and [S, N, E] without batch_first) -> [N, L, E] (or
  // [L, N, E]). Errors: shapes that do not fit together or E other than embed_dim; masks of other shapes or dtypes.
  Tensor forward(const Tensor& query, const Tensor& key, const Tensor& value, const AttentionMasks& masks = {});
  std::string extra_repr() const override;

  int64_t embed_dim() const { return embed_dim_; }
  int64_t num_heads() const { return num_heads_; }

  Tensor in_proj_weight;
  Tensor in_proj_bias;  // undefined (and not a parameter) without bias
  std::shared_ptr<Linear> out_proj;

 private:
  Tensor project(const Tensor& x, int64_t part) const;  // the query (0), key (1) or value (2) projection, in heads
  Tensor scores_bias(const AttentionMasks& masks, int64_t batch, int64_t queries, int64_t keys,
                     const Tensor& like) const;

  int64_t embed_dim_;
  int64_t num_heads_;
  MultiheadAttentionOptions options_;
};

}  // namespace tandem::nn
