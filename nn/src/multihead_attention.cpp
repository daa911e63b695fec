#include "tandem/nn/multihead_attention.h"

#include "attention_bias.h"
#include "tandem/core/autocast.h"
#include "tandem/core/error.h"
#include "tandem/core/ops.h"
#include "tandem/nn/attention.h"
#include "tandem/nn/init.h"

namespace tandem::nn {
namespace {

constexpr const char* kOp = "nn::MultiheadAttention";

}  // namespace

MultiheadAttention::MultiheadAttention(int64_t embed_dim, int64_t num_heads, MultiheadAttentionOptions options)
    : embed_dim_(embed_dim), num_heads_(num_heads), options_(options) {
  TANDEM_CHECK(embed_dim >= 1 && num_heads >= 1, kOp, ": embed_dim ", embed_dim, " and num_heads ", num_heads,
               " must be >= 1");
  TANDEM_CHECK(embed_dim % num_heads == 0, kOp, ": embed_dim ", embed_dim, " is not divisible by num_heads ",
               num_heads);
  TANDEM_CHECK(options.dropout >= 0.0 && options.dropout < 1.0, kOp, ": dropout is ", options.dropout,
               " but expected a probability in [0, 1)");
  out_proj = std::make_shared<Linear>(embed_dim, embed_dim, options.bias);
  in_proj_weight = Tensor::empty({3 * embed_dim, embed_dim});
  init::xavier_uniform_(in_proj_weight);
  register_parameter("in_proj_weight", in_proj_weight);
  if (options.bias) {
    in_proj_bias = Tensor::zeros({3 * embed_dim});
    register_parameter("in_proj_bias", in_proj_bias);
    init::zeros_(out_proj->bias);
  }
  register_module("out_proj", out_proj);
}

Tensor MultiheadAttention::forward(const Tensor& input) { return forward(input, input, input); }

Tensor MultiheadAttention::project(const Tensor& x, int64_t part) const {
  const int64_t batch = x.size(0), length = x.size(1);
  const Tensor weight = in_proj_weight.narrow(0, part * embed_dim_, embed_dim_);
  const Tensor bias = in_proj_bias.defined() ? in_proj_bias.narrow(0, part * embed_dim_, embed_dim_) : Tensor();
  const Tensor y = linear(x.reshape({batch * length, embed_dim_}), weight, bias, precision());
  return y.view({batch, length, num_heads_, embed_dim_ / num_heads_}).transpose(1, 2);
}

Tensor MultiheadAttention::scores_bias(const AttentionMasks& masks, int64_t batch, int64_t queries, int64_t keys,
                                       const Tensor& like) const {
  Tensor bias;
  if (masks.attn_mask.defined()) {
    const Tensor& mask = masks.attn_mask;
    const bool shared = mask.shape() == Shape{queries, keys};
    const bool per_head = mask.shape() == Shape{batch * num_heads_, queries, keys};
    TANDEM_CHECK(shared || per_head, kOp, ": attn_mask has shape ",
                 to_string(mask.shape()), " but expected [", queries, ", ", keys, "] or [", batch * num_heads_, ", ",
                 queries, ", ", keys, "] (N * num_heads, L, S)");
    bias = detail::mask_bias(mask, /*nonzero_left_out=*/true, kOp, "attn_mask");
    if (!shared) bias = bias.reshape({batch, num_heads_, queries, keys});
  } else if (masks.is_causal && masks.key_padding_mask.defined()) {
    bias = detail::causal_bias(queries, keys, like.device());
  }
  if (masks.key_padding_mask.defined()) {
    const Tensor& mask = masks.key_padding_mask;
    const bool fits = mask.shape() == Shape{batch, keys};
    TANDEM_CHECK(fits, kOp, ": key_padding_mask has shape ", to_string(mask.shape()),
                 " but expected [", batch, ", ", keys, "] (N, S)");
    const Tensor padding = detail::mask_bias(mask, /*nonzero_left_out=*/true, kOp, "key_padding_mask")
                               .reshape({batch, 1, 1, keys});
    bias = bias.defined() ? bias + padding : padding;
  }
  return bias;
}

Tensor MultiheadAttention::forward(const Tensor& query, const Tensor& key, const Tensor& value,
                                   const AttentionMasks& masks) {
  for (const Tensor* t : {&query, &key, &value}) {
    TANDEM_CHECK(t->defined() && t->dim() == 3 && t->size(2) == embed_dim_, kOp, ": inputs must be 3-D with ",
                 embed_dim_, " features, got shapes ", to_string(query.shape()), ", ", to_string(key.shape()), " and ",
                 to_string(value.shape()));
  }
  const auto batch_major = [&](const Tensor& t) { return options_.batch_first ? t : t.transpose(0, 1); };
  const Tensor q = batch_major(query), k = batch_major(key), v = batch_major(value);
  TANDEM_CHECK(k.shape() == v.shape() && k.size(0) == q.size(0), kOp, ": query ", to_string(query.shape()),
               ", key ", to_string(key.shape()), " and value ", to_string(value.shape()),
               " must share the batch size, and key and value their length");
  const int64_t batch = q.size(0), queries = q.size(1), keys = k.size(1);
  const Tensor bias = scores_bias(masks, batch, queries, keys, q);
  // The attention's own products (scores and weighted values) run in the module's precision, as its projections do.
  const tandem::detail::AutocastStateGuard products(precision() ? precision() : autocast_precision());
  const bool causal = masks.is_causal && !bias.defined();
  const double dropout_p = is_training() ? options_.dropout : 0.0;
  const Tensor heads = scaled_dot_product_attention(project(q, 0), project(k, 1), project(v, 2), bias, dropout_p,
                                                    causal);
  const Tensor joined = heads.transpose(1, 2).reshape({batch * queries, embed_dim_});
  const Tensor out = out_proj->forward(joined).view({batch, queries, embed_dim_});
  return options_.batch_first ? out : out.transpose(0, 1);
}

std::string MultiheadAttention::extra_repr() const {
  return "embed_dim=" + std::to_string(embed_dim_) + ", num_heads=" + std::to_string(num_heads_) +
         ", dropout=" + std::to_string(options_.dropout) + ", bias=" + (options_.bias ? "true" : "false") +
         ", batch_first=" + (options_.batch_first ? "true" : "false");
}

}  // namespace tandem::nn
