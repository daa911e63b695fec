#include "tandem/trainers/gpt.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "tandem/core/autocast.h"
#include "tandem/core/error.h"
#include "tandem/core/grad_mode.h"
#include "tandem/core/ops.h"
#include "tandem/nn/attention.h"
#include "tandem/nn/dropout.h"
#include "tandem/nn/init.h"
#include "tandem/nn/training_mode_guard.h"

namespace tandem::trainers {
namespace {

constexpr const char* kGpt = "trainers::GPT";
constexpr double kInitStd = 0.02;  // nanoGPT's

void check_config(const GPTConfig& c) {
  for (const auto& [name, value] : {std::pair{"vocab_size", c.vocab_size}, std::pair{"block_size", c.block_size},
                                    std::pair{"n_layer", c.n_layer}, std::pair{"n_head", c.n_head},
                                    std::pair{"n_embd", c.n_embd}}) {
    TANDEM_CHECK(value >= 1, kGpt, ": ", name, " is ", value, " but expected at least 1");
  }
  TANDEM_CHECK(c.n_embd % c.n_head == 0, kGpt, ": n_embd ", c.n_embd, " is not a multiple of n_head ", c.n_head);
  TANDEM_CHECK(c.dropout >= 0.0 && c.dropout < 1.0, kGpt, ": dropout is ", c.dropout,
               " but expected a probability in [0, 1)");
}

// nanoGPT's _init_weights for one Linear: weight N(0, std), bias zero.
void init_linear(nn::Linear& layer, double std) {
  nn::init::normal_(layer.weight, 0.0, std);
  if (layer.bias.defined()) nn::init::zeros_(layer.bias);
}

std::shared_ptr<nn::LayerNorm> layer_norm(const GPTConfig& config) {
  return std::make_shared<nn::LayerNorm>(Shape{config.n_embd}, 1e-5, /*elementwise_affine=*/true, config.bias);
}

}  // namespace

CausalSelfAttention::CausalSelfAttention(const GPTConfig& config)
    : c_attn(std::make_shared<nn::Linear>(config.n_embd, 3 * config.n_embd, config.bias)),
      c_proj(std::make_shared<nn::Linear>(config.n_embd, config.n_embd, config.bias)),
      n_head_(config.n_head),
      n_embd_(config.n_embd),
      dropout_(config.dropout) {
  register_module("c_attn", c_attn);
  register_module("c_proj", c_proj);
}

Tensor CausalSelfAttention::forward(const Tensor& x) {
  const int64_t batch = x.size(0), length = x.size(1), head_dim = n_embd_ / n_head_;
  // q, k and v as views of one [B, T, 3 C] product; split gives their gradients one home (Note [Split gradients]).
  const std::vector<Tensor> qkv = c_attn->forward(x).split({n_embd_, n_embd_, n_embd_}, 2);
  const auto heads = [&](int64_t part) {  // [B, n_head, T, head_dim], a view of the product
    return qkv[part].reshape({batch, length, n_head_, head_dim}).transpose(1, 2);
  };
  // The attention's products run in the module's precision, as c_attn's and c_proj's do.
  const tandem::detail::AutocastStateGuard products(precision() ? precision() : autocast_precision());
  const Tensor y = nn::scaled_dot_product_attention(heads(0), heads(1), heads(2), {},
                                                    is_training() ? dropout_ : 0.0, /*is_causal=*/true);
  const Tensor joined = y.transpose(1, 2).reshape({batch, length, n_embd_});
  return nn::dropout(c_proj->forward(joined), dropout_, is_training());
}

GPTMLP::GPTMLP(const GPTConfig& config)
    : c_fc(std::make_shared<nn::Linear>(config.n_embd, 4 * config.n_embd, config.bias)),
      c_proj(std::make_shared<nn::Linear>(4 * config.n_embd, config.n_embd, config.bias)),
      dropout_(config.dropout) {
  register_module("c_fc", c_fc);
  register_module("c_proj", c_proj);
}

Tensor GPTMLP::forward(const Tensor& x) {
  return nn::dropout(c_proj->forward(gelu(c_fc->forward(x), "tanh")), dropout_, is_training());
}

GPTBlock::GPTBlock(const GPTConfig& config)
    : ln_1(layer_norm(config)),
      attn(std::make_shared<CausalSelfAttention>(config)),
      ln_2(layer_norm(config)),
      mlp(std::make_shared<GPTMLP>(config)) {
  register_module("ln_1", ln_1);
  register_module("attn", attn);
  register_module("ln_2", ln_2);
  register_module("mlp", mlp);
}

Tensor GPTBlock::forward(const Tensor& x) {
  const Tensor attended = x + attn->forward(ln_1->forward(x));
  return attended + mlp->forward(ln_2->forward(attended));
}

GPTTransformer::GPTTransformer(const GPTConfig& config)
    : wte(std::make_shared<nn::Embedding>(config.vocab_size, config.n_embd)),
      wpe(std::make_shared<nn::Embedding>(config.block_size, config.n_embd)),
      ln_f(layer_norm(config)),
      dropout_(config.dropout) {
  for (int64_t i = 0; i < config.n_layer; ++i) h->push_back(std::make_shared<GPTBlock>(config));
  register_module("wte", wte);
  register_module("wpe", wpe);
  register_module("h", h);
  register_module("ln_f", ln_f);
}

Tensor GPTTransformer::forward(const Tensor& tokens) {
  const int64_t length = tokens.size(1);
  if (!positions_.defined() || positions_.device() != tokens.device()) {
    positions_ = Tensor::arange(wpe->num_embeddings(), DType::Int64, tokens.device());
  }
  Tensor x = nn::dropout(wte->forward(tokens) + wpe->forward(positions_.narrow(0, 0, length)), dropout_,
                         is_training());
  for (const auto& block : *h) x = block->forward(x);
  return ln_f->forward(x);
}

GPT::GPT(GPTConfig config) : config_(config) {
  check_config(config_);
  transformer = std::make_shared<GPTTransformer>(config_);
  lm_head = std::make_shared<nn::Linear>(config_.n_embd, config_.vocab_size, /*bias=*/false);
  register_module("transformer", transformer);
  register_module("lm_head", lm_head);
  // Note [Tied embedding]: one tensor in two slots (Note [Shared parameters] in module.h): the head's logits are the
  // hidden states' products with every token's embedding, and both uses add to one gradient.
  lm_head->weight = transformer->wte->weight;

  nn::init::normal_(transformer->wte->weight, 0.0, kInitStd);
  nn::init::normal_(transformer->wpe->weight, 0.0, kInitStd);
  const double residual_std = kInitStd / std::sqrt(2.0 * static_cast<double>(config_.n_layer));
  for (const auto& module : *transformer->h) {
    auto& block = static_cast<GPTBlock&>(*module);
    init_linear(*block.attn->c_attn, kInitStd);
    init_linear(*block.attn->c_proj, residual_std);
    init_linear(*block.mlp->c_fc, kInitStd);
    init_linear(*block.mlp->c_proj, residual_std);
  }
}

void GPT::check_tokens(const Tensor& tokens, int64_t longest) const {
  TANDEM_CHECK(tokens.defined() && tokens.dim() == 2 && tokens.dtype() == DType::Int64, kGpt,
               ": tokens must be int64 [batch, length], got ",
               tokens.defined() ? to_string(tokens.shape()) + " " + dtype_name(tokens.dtype()) : "an undefined tensor");
  TANDEM_CHECK(tokens.size(1) >= 1 && tokens.size(1) <= longest, kGpt, ": a sequence of ", tokens.size(1),
               " tokens, but block_size is ", config_.block_size);
}

Tensor GPT::forward(const Tensor& tokens) {
  check_tokens(tokens, config_.block_size);
  return lm_head->forward(transformer->forward(tokens));
}

Tensor GPT::generate(const Tensor& tokens, int64_t max_new_tokens, double temperature, std::optional<int64_t> top_k) {
  TANDEM_CHECK(temperature > 0.0 && std::isfinite(temperature), kGpt, "::generate: temperature is ", temperature,
               " but expected a positive number");
  TANDEM_CHECK(!top_k || *top_k >= 1, kGpt, "::generate: top_k is ", top_k.value_or(0), " but expected at least 1");
  TANDEM_CHECK(max_new_tokens >= 0, kGpt, "::generate: max_new_tokens is ", max_new_tokens, " but expected >= 0");
  check_tokens(tokens, std::numeric_limits<int64_t>::max());  // longer prompts are cropped below
  const nn::TrainingModeGuard eval(*this, false);
  const NoGradGuard no_grad;
  const int64_t batch = tokens.size(0), vocab = config_.vocab_size;
  std::vector<int64_t> ids = tokens.to(Device::cpu()).contiguous().to_vector_as<int64_t>();
  int64_t length = tokens.size(1);
  for (int64_t step = 0; step < max_new_tokens; ++step) {
    const int64_t context = std::min(length, config_.block_size);
    std::vector<int64_t> window;
    for (int64_t b = 0; b < batch; ++b) {
      const auto row = ids.begin() + b * length;
      window.insert(window.end(), row + (length - context), row + length);
    }
    const Tensor logits = forward(Tensor::from_vector(window, {batch, context}, device()));
    const std::vector<float> last = logits.narrow(1, context - 1, 1).contiguous().to_vector();
    const std::vector<float> uniform = Tensor::rand({batch}).to_vector();
    std::vector<int64_t> next(static_cast<size_t>(batch));
    for (int64_t b = 0; b < batch; ++b) {
      std::vector<double> scores(last.begin() + b * vocab, last.begin() + (b + 1) * vocab);
      for (double& s : scores) s /= temperature;
      if (top_k && *top_k < vocab) {  // leave out every score below the k-th largest, as nanoGPT
        std::vector<double> sorted = scores;
        std::nth_element(sorted.begin(), sorted.begin() + (*top_k - 1), sorted.end(), std::greater<>());
        const double kth = sorted[static_cast<size_t>(*top_k - 1)];
        for (double& s : scores) s = s < kth ? -std::numeric_limits<double>::infinity() : s;
      }
      const double top = *std::max_element(scores.begin(), scores.end());
      double total = 0.0;
      for (double& s : scores) total += (s = std::exp(s - top));
      // The first token whose cumulative probability exceeds the uniform draw.
      double cumulative = 0.0;
      int64_t chosen = vocab - 1;
      for (int64_t v = 0; v < vocab; ++v) {
        cumulative += scores[static_cast<size_t>(v)] / total;
        if (uniform[static_cast<size_t>(b)] < cumulative) {
          chosen = v;
          break;
        }
      }
      next[static_cast<size_t>(b)] = chosen;
    }
    std::vector<int64_t> extended;
    for (int64_t b = 0; b < batch; ++b) {
      extended.insert(extended.end(), ids.begin() + b * length, ids.begin() + (b + 1) * length);
      extended.push_back(next[static_cast<size_t>(b)]);
    }
    ids = std::move(extended);
    ++length;
  }
  return Tensor::from_vector(ids, {batch, length}, tokens.device());
}

int64_t GPT::num_parameters_without_positions() const {
  return num_parameters() - transformer->wpe->weight.numel();
}

std::shared_ptr<GPT> make_gpt(const GPTConfig& config) { return std::make_shared<GPT>(config); }

double gpt_flops_per_token(const GPT& gpt, int64_t sequence_length) {
  const GPTConfig& c = gpt.config();
  return 6.0 * static_cast<double>(gpt.num_parameters_without_positions()) +
         12.0 * static_cast<double>(c.n_layer * c.n_embd * sequence_length);
}

}  // namespace tandem::trainers
