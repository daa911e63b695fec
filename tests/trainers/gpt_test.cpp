// trainers::GPT: nanoGPT's names, sizes, tie and initialization; causal logits; greedy generation; errors.
#include <cmath>

#include "support/test_support.h"
#include "tandem/trainers/gpt.h"

namespace tandem::trainers {
namespace {

const GPTConfig kTiny{.vocab_size = 11, .block_size = 8, .n_layer = 2, .n_head = 2, .n_embd = 8};

TEST(GPT, HasNanoGptsParameterNamesWithTheHeadTiedToTheTokenEmbedding) {
  manual_seed(1);
  const auto gpt = make_gpt(kTiny);
  std::vector<std::string> names;
  for (const auto& [name, tensor] : gpt->named_parameters()) names.push_back(name);
  std::vector<std::string> expected = {"transformer.wte.weight", "transformer.wpe.weight"};
  for (const char* block : {"transformer.h.0.", "transformer.h.1."}) {
    for (const char* p : {"ln_1.weight", "ln_1.bias", "attn.c_attn.weight", "attn.c_attn.bias", "attn.c_proj.weight",
                          "attn.c_proj.bias", "ln_2.weight", "ln_2.bias", "mlp.c_fc.weight", "mlp.c_fc.bias",
                          "mlp.c_proj.weight", "mlp.c_proj.bias"}) {
      expected.push_back(std::string(block) + p);
    }
  }
  expected.insert(expected.end(), {"transformer.ln_f.weight", "transformer.ln_f.bias"});
  EXPECT_EQ(names, expected) << "lm_head.weight is transformer.wte.weight, listed once under its first name";
  EXPECT_EQ(gpt->lm_head->weight.impl_ptr(), gpt->transformer->wte->weight.impl_ptr());
  // 12 E^2 + 13 E per block (with the biases), the embeddings, the final norm.
  const int64_t e = 8;
  EXPECT_EQ(gpt->num_parameters(), 2 * (12 * e * e + 13 * e) + 11 * e + 8 * e + 2 * e);
  EXPECT_EQ(gpt->num_parameters_without_positions(), gpt->num_parameters() - 8 * e);
}

TEST(GPT, WithoutBiasHasNoBiasesAnywhere) {
  GPTConfig config = kTiny;
  config.bias = false;
  const auto gpt = make_gpt(config);
  for (const auto& [name, tensor] : gpt->named_parameters()) {
    EXPECT_EQ(name.find("bias"), std::string::npos) << name;
  }
  EXPECT_EQ(gpt->num_parameters(), 2 * (12 * 8 * 8 + 2 * 8) + 11 * 8 + 8 * 8 + 8);
}

// Standard deviation of a tensor's values.
double deviation(const Tensor& t) {
  const std::vector<double> v = testing::to_double(t);
  double mean = 0.0, squares = 0.0;
  for (double x : v) mean += x / static_cast<double>(v.size());
  for (double x : v) squares += (x - mean) * (x - mean) / static_cast<double>(v.size());
  return std::sqrt(squares);
}

TEST(GPT, IsInitializedAsNanoGpt) {
  manual_seed(2);
  const auto gpt = make_gpt({.vocab_size = 512, .block_size = 64, .n_layer = 4, .n_head = 4, .n_embd = 128});
  const auto& block = static_cast<const GPTBlock&>(*(*gpt->transformer->h)[0]);
  EXPECT_NEAR(deviation(gpt->transformer->wte->weight), 0.02, 0.001);
  EXPECT_NEAR(deviation(gpt->transformer->wpe->weight), 0.02, 0.002);
  EXPECT_NEAR(deviation(block.attn->c_attn->weight), 0.02, 0.001);
  EXPECT_NEAR(deviation(block.mlp->c_fc->weight), 0.02, 0.001);
  const double residual = 0.02 / std::sqrt(2.0 * 4);
  EXPECT_NEAR(deviation(block.attn->c_proj->weight), residual, residual * 0.05);
  EXPECT_NEAR(deviation(block.mlp->c_proj->weight), residual, residual * 0.05);
  EXPECT_EQ(testing::to_double(block.attn->c_attn->bias), std::vector<double>(3 * 128, 0.0));
  EXPECT_EQ(testing::to_double(block.ln_1->weight), std::vector<double>(128, 1.0));
}

class GPTOnDevices : public testing::EveryDevice {};

// A token affects the logits at its position and after, never before (the causal mask), and the logits have
// [B, T, vocab] shape.
TEST_P(GPTOnDevices, LogitsAtAPositionDependOnlyOnTheTokensUpToIt) {
  manual_seed(3);
  const auto gpt = make_gpt(kTiny);
  gpt->to(device());
  const std::vector<int64_t> tokens = {1, 5, 2, 7, 3, 3, 9, 0, 4, 4, 6, 1};
  std::vector<int64_t> changed = tokens;
  changed[4] = 10;  // row 0, position 4
  const Tensor a = gpt->forward(Tensor::from_vector(tokens, {2, 6}, device()));
  const Tensor b = gpt->forward(Tensor::from_vector(changed, {2, 6}, device()));
  ASSERT_EQ(a.shape(), (Shape{2, 6, 11}));
  EXPECT_EQ(max_abs_diff(a.narrow(1, 0, 4), b.narrow(1, 0, 4)), 0.0) << "positions before the change";
  EXPECT_GT(max_abs_diff(a.narrow(1, 4, 2).narrow(0, 0, 1), b.narrow(1, 4, 2).narrow(0, 0, 1)), 1e-4);
  EXPECT_EQ(max_abs_diff(a.narrow(0, 1, 1), b.narrow(0, 1, 1)), 0.0) << "the other row";
}

// With top_k = 1 each new token is the argmax of the last position's logits: the greedy continuation, checked
// against forward step by step.
TEST_P(GPTOnDevices, GenerationWithTopKOneIsGreedy) {
  manual_seed(4);
  const auto gpt = make_gpt(kTiny);
  gpt->to(device());
  const Tensor prompt = Tensor::from_vector(std::vector<int64_t>{3, 1, 4}, {1, 3}, device());
  const Tensor out = gpt->generate(prompt, 7, 0.8, 1);  // 10 tokens: the context is cropped to block_size 8
  ASSERT_EQ(out.shape(), (Shape{1, 10}));
  const std::vector<int64_t> ids = out.to_vector_as<int64_t>();
  EXPECT_EQ(std::vector<int64_t>(ids.begin(), ids.begin() + 3), (std::vector<int64_t>{3, 1, 4}));
  for (int64_t t = 3; t < 10; ++t) {
    const int64_t context = std::min<int64_t>(t, 8);
    const std::vector<int64_t> window(ids.begin() + (t - context), ids.begin() + t);
    const Tensor logits = gpt->forward(Tensor::from_vector(window, {1, context}, device()));
    const int64_t best = argmax(logits.narrow(1, context - 1, 1).reshape({11}), 0).to_vector_as<int64_t>()[0];
    EXPECT_EQ(ids[static_cast<size_t>(t)], best) << "token " << t;
  }
  EXPECT_TRUE(gpt->is_training()) << "generate gives the modes back";
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(GPTOnDevices);

TEST(GPT, BadConfigurationsAndInputsAreErrors) {
  EXPECT_ERROR(make_gpt({.vocab_size = 11, .block_size = 8, .n_layer = 1, .n_head = 3, .n_embd = 8}),
               "trainers::GPT: n_embd 8 is not a multiple of n_head 3");
  EXPECT_ERROR(make_gpt({.vocab_size = 0}), "trainers::GPT: vocab_size is 0 but expected at least 1");
  EXPECT_ERROR(make_gpt({.vocab_size = 11, .block_size = 8, .n_layer = 1, .n_head = 2, .n_embd = 8, .dropout = 1.0}),
               "trainers::GPT: dropout is 1 but expected a probability in [0, 1)");
  const auto gpt = make_gpt(kTiny);
  EXPECT_ERROR(gpt->forward(Tensor::zeros({2, 3})), "trainers::GPT: tokens must be int64 [batch, length], got [2, 3]");
  EXPECT_ERROR(gpt->forward(Tensor::zeros({1, 9}, DType::Int64)),
               "trainers::GPT: a sequence of 9 tokens, but block_size is 8");
  EXPECT_ERROR(gpt->forward(Tensor::full({1, 2}, 11.0, DType::Int64)), "index_select");
  EXPECT_ERROR(gpt->generate(Tensor::zeros({1, 2}, DType::Int64), 1, 0.0),
               "trainers::GPT::generate: temperature is 0 but expected a positive number");
  EXPECT_ERROR(gpt->generate(Tensor::zeros({1, 2}, DType::Int64), 1, 1.0, 0),
               "trainers::GPT::generate: top_k is 0 but expected at least 1");
}

}  // namespace
}  // namespace tandem::trainers
