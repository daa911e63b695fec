#include "tandem/nn/transformer.h"

#include "tandem/core/error.h"
#include "tandem/core/ops.h"
#include "tandem/nn/dropout.h"

namespace tandem::nn {

TransformerEncoderLayer::TransformerEncoderLayer(int64_t d_model, int64_t nhead,
                                                 TransformerEncoderLayerOptions options)
    : options_(std::move(options)) {
  constexpr const char* op = "nn::TransformerEncoderLayer";
  TANDEM_CHECK(options_.dim_feedforward >= 1, op, ": dim_feedforward is ", options_.dim_feedforward,
               " but expected >= 1");
  TANDEM_CHECK(options_.activation == "relu" || options_.activation == "gelu", op, ": activation is \"",
               options_.activation, "\" but expected \"relu\" or \"gelu\"");
  self_attn = std::make_shared<MultiheadAttention>(
      d_model, nhead,
      MultiheadAttentionOptions{.dropout = options_.dropout, .bias = options_.bias, .batch_first = true});
  linear1 = std::make_shared<Linear>(d_model, options_.dim_feedforward, options_.bias);
  linear2 = std::make_shared<Linear>(options_.dim_feedforward, d_model, options_.bias);
  norm1 = std::make_shared<LayerNorm>(Shape{d_model}, options_.layer_norm_eps);
  norm2 = std::make_shared<LayerNorm>(Shape{d_model}, options_.layer_norm_eps);
  register_module("self_attn", self_attn);
  register_module("linear1", linear1);
  register_module("linear2", linear2);
  register_module("norm1", norm1);
  register_module("norm2", norm2);
}

Tensor TransformerEncoderLayer::forward(const Tensor& src) { return forward(src, {}); }

Tensor TransformerEncoderLayer::attention_block(const Tensor& x, const AttentionMasks& masks) {
  return dropout(self_attn->forward(x, x, x, masks), options_.dropout, is_training());
}

Tensor TransformerEncoderLayer::feed_forward_block(const Tensor& x) {
  const Tensor hidden = linear1->forward(x);
  const Tensor activated = options_.activation == "relu" ? relu(hidden) : gelu(hidden);
  const Tensor out = linear2->forward(dropout(activated, options_.dropout, is_training()));
  return dropout(out, options_.dropout, is_training());
}

Tensor TransformerEncoderLayer::forward(const Tensor& src, const AttentionMasks& masks) {
  TANDEM_CHECK(src.defined() && src.dim() == 3, "nn::TransformerEncoderLayer: src has shape ",
               src.defined() ? to_string(src.shape()) : "(undefined)", " but expected 3 dims");
  Tensor x = options_.batch_first ? src : src.transpose(0, 1);
  if (options_.norm_first) {
    x = x + attention_block(norm1->forward(x), masks);
    x = x + feed_forward_block(norm2->forward(x));
  } else {
    x = norm1->forward(x + attention_block(x, masks));
    x = norm2->forward(x + feed_forward_block(x));
  }
  return options_.batch_first ? x : x.transpose(0, 1);
}

TransformerEncoder::TransformerEncoder(const TransformerEncoderLayer& layer, int64_t num_layers,
                                       std::shared_ptr<LayerNorm> norm)
    : norm(std::move(norm)) {
  TANDEM_CHECK(num_layers >= 1, "nn::TransformerEncoder: num_layers is ", num_layers, " but expected >= 1");
  for (int64_t i = 0; i < num_layers; ++i) layers->push_back(layer.clone());
  register_module("layers", layers);
  if (this->norm) register_module("norm", this->norm);
}

Tensor TransformerEncoder::forward(const Tensor& src) { return forward(src, {}); }

Tensor TransformerEncoder::forward(const Tensor& src, const AttentionMasks& masks) {
  Tensor x = src;
  for (const auto& layer : *layers) x = static_cast<TransformerEncoderLayer&>(*layer).forward(x, masks);
  return norm ? norm->forward(x) : x;
}

}  // namespace tandem::nn
