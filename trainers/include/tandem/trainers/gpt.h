#pragma once
// GPT: the GPT-2 structure, as nanoGPT's model.py writes it, with its module names, so that a nanoGPT state_dict
// saved as safetensors loads (nn::load_safetensors):
//   transformer.wte       nn::Embedding(vocab_size, n_embd)      token embedding, tied with lm_head
//   transformer.wpe       nn::Embedding(block_size, n_embd)      position embedding
//   transformer.h.N       GPTBlock: ln_1, attn (c_attn, c_proj), ln_2, mlp (c_fc, c_proj), N = 0 .. n_layer - 1
//   transformer.ln_f      nn::LayerNorm(n_embd)
//   lm_head               nn::Linear(n_embd, vocab_size, bias = false), whose weight is transformer.wte.weight
// A block is pre-LayerNorm: x = x + attn(ln_1(x)); x = x + mlp(ln_2(x)), with causal self-attention over n_head
// heads (nn::scaled_dot_product_attention with is_causal) and an MLP n_embd -> 4 n_embd -> n_embd with GELU's tanh
// form; dropout (config.dropout) on the embeddings' sum, the attention weights and each block's two residual
// branches, in training mode only. Initialization as nanoGPT's: every Linear and Embedding weight N(0, 0.02), biases
// zero, LayerNorms ones and zeros, and each block's residual projections (attn.c_proj, mlp.c_proj) N(0, 0.02 /
// sqrt(2 n_layer)), drawn from the global generator.
//
//   manual_seed(1337);
//   auto gpt = trainers::make_gpt({.vocab_size = 84, .block_size = 256, .n_layer = 6, .n_head = 6, .n_embd = 384});
//   Tensor logits = gpt->forward(tokens);                                   // int64 [B, T] -> [B, T, vocab_size]
//   Tensor loss = nn::cross_entropy(logits.reshape({-1, 84}), targets.reshape({-1}));
//
// A precision set on the model (nn::Module::set_precision) or an AutocastGuard applies to every product, the
// attention's included.

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "tandem/nn/containers.h"
#include "tandem/nn/embedding.h"
#include "tandem/nn/linear.h"
#include "tandem/nn/normalization.h"

namespace tandem::trainers {

struct GPTConfig {
  int64_t vocab_size = 50304;  // GPT-2's 50257 tokens padded to a multiple of 64, as nanoGPT
  int64_t block_size = 1024;   // the longest sequence, and the position embedding's rows
  int64_t n_layer = 12;
  int64_t n_head = 12;
  int64_t n_embd = 768;  // a multiple of n_head
  double dropout = 0.0;
  bool bias = true;  // biases in the Linear layers and LayerNorms (lm_head never has one)
};

// Causal self-attention over config.n_head heads: c_attn (n_embd -> 3 n_embd: queries, keys, values) and c_proj.
class CausalSelfAttention : public nn::Cloneable<CausalSelfAttention> {
 public:
  explicit CausalSelfAttention(const GPTConfig& config);
  Tensor forward(const Tensor& x) override;  // [B, T, n_embd] -> [B, T, n_embd]

  std::shared_ptr<nn::Linear> c_attn, c_proj;

 private:
  int64_t n_head_;
  int64_t n_embd_;
  double dropout_;
};

// c_fc (n_embd -> 4 n_embd), GELU (tanh), c_proj (4 n_embd -> n_embd), dropout.
class GPTMLP : public nn::Cloneable<GPTMLP> {
 public:
  explicit GPTMLP(const GPTConfig& config);
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<nn::Linear> c_fc, c_proj;

 private:
  double dropout_;
};

class GPTBlock : public nn::Cloneable<GPTBlock> {
 public:
  explicit GPTBlock(const GPTConfig& config);
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<nn::LayerNorm> ln_1;
  std::shared_ptr<CausalSelfAttention> attn;
  std::shared_ptr<nn::LayerNorm> ln_2;
  std::shared_ptr<GPTMLP> mlp;
};

// nanoGPT's `transformer` ModuleDict as a class of its own: wte, wpe, h, ln_f.
class GPTTransformer : public nn::Cloneable<GPTTransformer> {
 public:
  explicit GPTTransformer(const GPTConfig& config);
  // The final hidden states, [B, T, n_embd], of int64 tokens [B, T].
  Tensor forward(const Tensor& tokens) override;

  std::shared_ptr<nn::Embedding> wte, wpe;
  std::shared_ptr<nn::ModuleList> h = std::make_shared<nn::ModuleList>();
  std::shared_ptr<nn::LayerNorm> ln_f;

 private:
  double dropout_;
  Tensor positions_;  // 0 .. block_size - 1 (int64) on the device last used, not part of the state
};

class GPT : public nn::Cloneable<GPT> {
 public:
  // Errors: a size below 1; n_embd not a multiple of n_head; dropout outside [0, 1).
  explicit GPT(GPTConfig config);
  // Logits [B, T, vocab_size] of int64 tokens [B, T], T <= block_size, on the model's device. Errors: tokens that are
  // not int64 of 2 dims, longer than block_size, or on another device; a token outside [0, vocab_size).
  Tensor forward(const Tensor& tokens) override;
  // Extends `tokens` (int64 [B, T]) by max_new_tokens tokens, each drawn from the softmax of the last position's
  // logits divided by temperature, keeping the top_k most likely when given (nanoGPT's generate); the context is
  // cropped to the last block_size tokens. Runs in eval mode without recording gradients and gives the model its
  // modes back. Draws from the global generator. Errors: temperature not > 0; top_k < 1; tokens as for forward.
  Tensor generate(const Tensor& tokens, int64_t max_new_tokens, double temperature = 1.0,
                  std::optional<int64_t> top_k = std::nullopt);

  const GPTConfig& config() const { return config_; }
  // The parameters but the position embedding's, as nanoGPT reports them.
  int64_t num_parameters_without_positions() const;

  std::shared_ptr<GPTTransformer> transformer;
  std::shared_ptr<nn::Linear> lm_head;

 private:
  // Errors (naming the model): tokens that are not int64 [batch, length] with 1 <= length <= longest.
  void check_tokens(const Tensor& tokens, int64_t longest) const;

  GPTConfig config_;
};

// A GPT of `config`, initialized from the global generator as nanoGPT initializes it (see above).
std::shared_ptr<GPT> make_gpt(const GPTConfig& config);

// nanoGPT's estimate of the model FLOPs of one training step (forward and backward) per token:
// 6 N + 12 n_layer n_embd T, N the parameters without the position embedding, T the sequence length.
double gpt_flops_per_token(const GPT& gpt, int64_t sequence_length);

}  // namespace tandem::trainers
