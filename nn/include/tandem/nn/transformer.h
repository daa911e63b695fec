#pragma once
// nn::TransformerEncoderLayer and nn::TransformerEncoder: torch.nn's, with its submodule names (self_attn.*,
// linear1, linear2, norm1, norm2; layers.0, layers.1, ..., norm) so that a PyTorch state_dict loads, and its
// computation, post-norm by default or pre-norm with norm_first:
//   post-norm:  x = norm1(x + dropout(self_attn(x)));  x = norm2(x + dropout(linear2(dropout(act(linear1(x))))))
//   pre-norm:   x = x + dropout(self_attn(norm1(x)));  x = x + dropout(linear2(dropout(act(linear1(norm2(x))))))
//
//   nn::TransformerEncoderLayer layer(256, 8, {.dim_feedforward = 1024, .activation = "gelu", .norm_first = true});
//   nn::TransformerEncoder encoder(layer, 6);
//   Tensor y = encoder.forward(x, {.key_padding_mask = padding});   // x [N, L, 256]

#include <cstdint>
#include <memory>
#include <string>

#include "tandem/nn/containers.h"
#include "tandem/nn/linear.h"
#include "tandem/nn/multihead_attention.h"
#include "tandem/nn/normalization.h"

namespace tandem::nn {

struct TransformerEncoderLayerOptions {
  int64_t dim_feedforward = 2048;
  double dropout = 0.1;
  std::string activation = "relu";  // "relu" or "gelu"
  double layer_norm_eps = 1e-5;
  bool batch_first = true;  // inputs [N, L, E]; false: [L, N, E] (PyTorch's default is false)
  bool norm_first = false;
  bool bias = true;  // of the linear layers and the attention (the layer norms always have one)
};

class TransformerEncoderLayer : public Cloneable<TransformerEncoderLayer> {
 public:
  // Errors: d_model or nhead as MultiheadAttention refuses them; dim_feedforward < 1; dropout outside [0, 1);
  // activation other than "relu" or "gelu"; layer_norm_eps negative.
  TransformerEncoderLayer(int64_t d_model, int64_t nhead, TransformerEncoderLayerOptions options = {});

  Tensor forward(const Tensor& src) override;
  // src [N, L, E] (or [L, N, E]); the masks go to self_attn (AttentionMasks' conventions).
  Tensor forward(const Tensor& src, const AttentionMasks& masks);

  std::shared_ptr<MultiheadAttention> self_attn;
  std::shared_ptr<Linear> linear1, linear2;
  std::shared_ptr<LayerNorm> norm1, norm2;

 private:
  Tensor attention_block(const Tensor& x, const AttentionMasks& masks);
  Tensor feed_forward_block(const Tensor& x);

  TransformerEncoderLayerOptions options_;
};

class TransformerEncoder : public Cloneable<TransformerEncoder> {
 public:
  // num_layers copies of `layer` (its parameter values, as PyTorch's deep copies: every layer starts alike, each
  // trained on its own), then `norm` when given. Errors: num_layers < 1.
  TransformerEncoder(const TransformerEncoderLayer& layer, int64_t num_layers, std::shared_ptr<LayerNorm> norm = {});

  Tensor forward(const Tensor& src) override;
  Tensor forward(const Tensor& src, const AttentionMasks& masks);

  std::shared_ptr<ModuleList> layers = std::make_shared<ModuleList>();
  std::shared_ptr<LayerNorm> norm;  // null without a final norm
};

}  // namespace tandem::nn
