// nn::MultiheadAttention: PyTorch's parameter names and layouts, its output against the heads computed one by one
// with 2-D products, its masks and layouts, gradients, and errors, on every device.
#include <limits>

#include "support/test_support.h"

namespace tandem {
namespace {

using testing::expect_close;

class MultiheadAttentionTest : public testing::EveryDevice {
 protected:
  void SetUp() override {
    EveryDevice::SetUp();
    manual_seed(17);
  }
};

// The attention of one batch entry, head by head with 2-D products: x [L, E] and memory [S, E], bias [L, S] or none.
Tensor one_entry(const nn::MultiheadAttention& mha, const Tensor& x, const Tensor& memory, const Tensor& bias) {
  const int64_t E = mha.embed_dim(), H = mha.num_heads(), D = E / H;
  std::vector<Tensor> heads;
  for (int64_t h = 0; h < H; ++h) {
    const auto rows = [&](int64_t part) { return mha.in_proj_weight.narrow(0, part * E + h * D, D); };
    const auto shift = [&](int64_t part) { return mha.in_proj_bias.narrow(0, part * E + h * D, D); };
    const Tensor q = matmul(x, rows(0).t()) + shift(0);
    const Tensor k = matmul(memory, rows(1).t()) + shift(1);
    const Tensor v = matmul(memory, rows(2).t()) + shift(2);
    Tensor scores = matmul(q, k.t()) / std::sqrt(static_cast<float>(D));
    if (bias.defined()) scores = scores + bias;
    heads.push_back(matmul(softmax(scores, 1), v));
  }
  return matmul(cat(heads, 1), mha.out_proj->weight.t()) + mha.out_proj->bias;
}

TEST_P(MultiheadAttentionTest, HasPyTorchsNamesAndComputesEveryHead) {
  nn::MultiheadAttention mha(8, 2);
  mha.to(device());
  std::vector<std::string> names;
  for (const auto& [name, parameter] : mha.named_parameters()) names.push_back(name);
  EXPECT_EQ(names, (std::vector<std::string>{"in_proj_weight", "in_proj_bias", "out_proj.weight", "out_proj.bias"}));
  EXPECT_EQ(mha.in_proj_weight.shape(), (Shape{24, 8}));
  EXPECT_EQ(max(abs(mha.in_proj_bias)).item(), 0.0f);
  EXPECT_EQ(max(abs(mha.out_proj->bias)).item(), 0.0f);
  // Initialize the biases to something, so that the check covers them.
  mha.in_proj_bias.detach().copy_(Tensor::randn({24}, device()));
  mha.out_proj->bias.detach().copy_(Tensor::randn({8}, device()));

  const Tensor x = Tensor::randn({2, 3, 8}, device()), memory = Tensor::randn({2, 5, 8}, device());
  const Tensor self = mha.forward(x);
  const Tensor cross = mha.forward(x, memory, memory);
  EXPECT_EQ(cross.shape(), (Shape{2, 3, 8}));
  for (int64_t n = 0; n < 2; ++n) {
    const Tensor xn = x.narrow(0, n, 1).squeeze(0), mn = memory.narrow(0, n, 1).squeeze(0);
    expect_close(self.narrow(0, n, 1).squeeze(0), one_entry(mha, xn, xn, {}));
    expect_close(cross.narrow(0, n, 1).squeeze(0), one_entry(mha, xn, mn, {}));
  }
}

TEST_P(MultiheadAttentionTest, MasksLeaveOutWhatIsNonzero) {
  nn::MultiheadAttention mha(8, 4);
  mha.to(device());
  const Tensor x = Tensor::randn({2, 4, 8}, device());
  const float out = -std::numeric_limits<float>::infinity();
  // Entry 0 ignores its last key, entry 1 its first two.
  const Tensor padding = Tensor::from_vector(std::vector<int64_t>{0, 0, 0, 1, 1, 1, 0, 0}, {2, 4}, device());
  const Tensor padded = mha.forward(x, x, x, {.key_padding_mask = padding});
  const Tensor causal = mha.forward(x, x, x, {.is_causal = true});
  const Tensor both = mha.forward(x, x, x, {.key_padding_mask = padding, .is_causal = true});
  std::vector<float> causal_bias;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) causal_bias.push_back(j <= i ? 0.0f : out);
  const Tensor causal_matrix = Tensor::from_vector(causal_bias, {4, 4}, device());
  const std::vector<std::vector<float>> padding_rows = {{0, 0, 0, out}, {out, out, 0, 0}};
  for (int64_t n = 0; n < 2; ++n) {
    const Tensor xn = x.narrow(0, n, 1).squeeze(0);
    const Tensor row = Tensor::from_vector(padding_rows[n], {1, 4}, device());
    expect_close(padded.narrow(0, n, 1).squeeze(0), one_entry(mha, xn, xn, row.expand({4, 4})));
    expect_close(causal.narrow(0, n, 1).squeeze(0), one_entry(mha, xn, xn, causal_matrix));
    if (n == 0) expect_close(both.narrow(0, n, 1).squeeze(0), one_entry(mha, xn, xn, causal_matrix + row));
  }
  // The same causal mask given as attn_mask, boolean (nonzero: left out) and additive.
  std::vector<int64_t> above;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) above.push_back(j > i);
  expect_close(mha.forward(x, x, x, {.attn_mask = Tensor::from_vector(above, {4, 4}, device())}), causal);
  expect_close(mha.forward(x, x, x, {.attn_mask = causal_matrix}), causal);
}

TEST_P(MultiheadAttentionTest, SequenceFirstInputsGiveTheTransposedResult) {
  nn::MultiheadAttention batch_first(8, 2);
  nn::MultiheadAttention sequence_first(8, 2, {.batch_first = false});
  sequence_first.set_parameters(batch_first.parameters());
  batch_first.to(device());
  sequence_first.to(device());
  const Tensor x = Tensor::randn({2, 3, 8}, device());
  expect_close(sequence_first.forward(x.transpose(0, 1)), batch_first.forward(x).transpose(0, 1));
}

TEST_P(MultiheadAttentionTest, GradientsReachEveryParameterAndTheInputs) {
  nn::MultiheadAttention mha(4, 2, {.bias = true});
  mha.to(device());
  const Tensor x = Tensor::randn({2, 3, 4}, device()).set_requires_grad();
  testing::gradcheck([&](auto& in) { return mha.forward(in[0]); }, {x});
  sum(mha.forward(x)).backward();
  for (const auto& [name, parameter] : mha.named_parameters()) {
    ASSERT_TRUE(parameter.grad().defined()) << name;
    EXPECT_GT(max(abs(parameter.grad())).item(), 0.0f) << name;
  }
}

TEST_P(MultiheadAttentionTest, DropoutActsOnlyWhileTraining) {
  nn::MultiheadAttention mha(8, 2, {.dropout = 0.5});
  mha.to(device());
  const Tensor x = Tensor::randn({2, 3, 8}, device());
  const Tensor trained = mha.forward(x);
  mha.eval();
  const Tensor evaluated = mha.forward(x);
  expect_close(evaluated, mha.forward(x), 0, 0);
  EXPECT_GT(max_abs_diff(trained, evaluated), 1e-3);
}

TEST_P(MultiheadAttentionTest, BadArgumentsAreErrors) {
  EXPECT_ERROR(nn::MultiheadAttention(8, 3), "nn::MultiheadAttention: embed_dim 8 is not divisible by num_heads 3");
  EXPECT_ERROR(nn::MultiheadAttention(0, 1), "embed_dim 0 and num_heads 1 must be >= 1");
  EXPECT_ERROR(nn::MultiheadAttention(8, 2, {.dropout = 1.5}), "dropout is 1.5 but expected a probability");
  nn::MultiheadAttention mha(8, 2, {.bias = false});
  EXPECT_EQ(mha.parameters().size(), 2u);
  mha.to(device());
  const Tensor x = Tensor::randn({2, 3, 8}, device());
  EXPECT_ERROR(mha.forward(Tensor::randn({3, 8}, device())), "inputs must be 3-D with 8 features");
  EXPECT_ERROR(mha.forward(x, Tensor::randn({2, 4, 8}, device()), Tensor::randn({2, 5, 8}, device())),
               "must share the batch size, and key and value their length");
  EXPECT_ERROR(mha.forward(x, x, x, {.key_padding_mask = Tensor::zeros({2, 4}, DType::Int64, device())}),
               "key_padding_mask has shape [2, 4] but expected [2, 3] (N, S)");
  EXPECT_ERROR(mha.forward(x, x, x, {.attn_mask = Tensor::zeros({3, 4}, device())}),
               "attn_mask has shape [3, 4] but expected [3, 3] or [4, 3, 3]");
  EXPECT_ERROR(mha.forward(x, x, x, {.attn_mask = Tensor::zeros({3, 3}, DType::BFloat16, device())}),
               "attn_mask is bfloat16 but expected int64 (a boolean mask: nonzero is left out)");
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(MultiheadAttentionTest);

}  // namespace
}  // namespace tandem
