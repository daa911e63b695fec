// nn::scaled_dot_product_attention's reference path against a float64 computation of its definition, with masks,
// causality, scales and broadcast batches, its gradients by finite differences, and its dropout, on every device.
#include <cmath>
#include <limits>

#include "support/test_support.h"

namespace tandem {
namespace {

using testing::expect_values;
using testing::gradcheck;
using testing::to_double;

// softmax(q k^T * scale + bias) v in float64, for q [B, L, E], k [B, S, E], v [B, S, Ev] and bias [L, S] per batch
// (taken from `bias` [B or 1, L, S], or none).
std::vector<double> attention_reference(const Tensor& q, const Tensor& k, const Tensor& v, double scale,
                                        const std::vector<double>& bias, bool bias_per_batch) {
  const int64_t batches = q.size(0), L = q.size(1), E = q.size(2), S = k.size(1), Ev = v.size(2);
  const std::vector<double> qv = to_double(q), kv = to_double(k), vv = to_double(v);
  std::vector<double> out;
  for (int64_t b = 0; b < batches; ++b) {
    for (int64_t i = 0; i < L; ++i) {
      std::vector<double> scores(static_cast<size_t>(S));
      double largest = -std::numeric_limits<double>::infinity();
      for (int64_t j = 0; j < S; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < E; ++e) dot += qv[(b * L + i) * E + e] * kv[(b * S + j) * E + e];
        const double extra = bias.empty() ? 0.0 : bias[((bias_per_batch ? b : 0) * L + i) * S + j];
        scores[j] = dot * scale + extra;
        largest = std::max(largest, scores[j]);
      }
      double total = 0;
      for (double& s : scores) total += (s = std::exp(s - largest));
      for (int64_t c = 0; c < Ev; ++c) {
        double value = 0;
        for (int64_t j = 0; j < S; ++j) value += scores[j] / total * vv[(b * S + j) * Ev + c];
        out.push_back(value);
      }
    }
  }
  return out;
}

class AttentionTest : public testing::EveryDevice {
 protected:
  void SetUp() override {
    EveryDevice::SetUp();
    manual_seed(11);
  }
  Tensor input(const Shape& shape) { return Tensor::randn(shape, device()).set_requires_grad(); }
};

TEST_P(AttentionTest, MatchesTheDefinitionWithAndWithoutMasks) {
  const Tensor q = Tensor::randn({2, 3, 4}, device()), k = Tensor::randn({2, 5, 4}, device());
  const Tensor v = Tensor::randn({2, 5, 6}, device());
  expect_values(nn::scaled_dot_product_attention(q, k, v), attention_reference(q, k, v, 0.5, {}, false), {2, 3, 6});
  expect_values(nn::scaled_dot_product_attention(q, k, v, {}, 0.0, false, 0.25),
                attention_reference(q, k, v, 0.25, {}, false), {2, 3, 6});

  constexpr double kOut = -std::numeric_limits<double>::infinity();
  std::vector<double> causal;  // top-left aligned: query i sees keys 0..i
  for (int64_t i = 0; i < 3; ++i)
    for (int64_t j = 0; j < 5; ++j) causal.push_back(j <= i ? 0.0 : kOut);
  expect_values(nn::scaled_dot_product_attention(q, k, v, {}, 0.0, true),
                attention_reference(q, k, v, 0.5, causal, false), {2, 3, 6});

  // A boolean (int64) mask per batch, and an additive float one broadcast over the batch.
  std::vector<int64_t> keep;
  std::vector<double> keep_bias;
  for (int64_t i = 0; i < 2 * 3 * 5; ++i) {
    keep.push_back(i % 3 != 1);
    keep_bias.push_back(i % 3 != 1 ? 0.0 : kOut);
  }
  const Tensor bool_mask = Tensor::from_vector(keep, {2, 3, 5}, device());
  expect_values(nn::scaled_dot_product_attention(q, k, v, bool_mask), attention_reference(q, k, v, 0.5, keep_bias, true),
                {2, 3, 6});
  const Tensor float_mask = Tensor::randn({3, 5}, device());
  expect_values(nn::scaled_dot_product_attention(q, k, v, float_mask),
                attention_reference(q, k, v, 0.5, to_double(float_mask), false), {2, 3, 6});
}

TEST_P(AttentionTest, HeadsBroadcastLikeMatmulAndARowWithNoKeyIsNaN) {
  // [B, H, L, E] queries against keys shared by every head ([B, 1, S, E]).
  const Tensor q = Tensor::randn({2, 3, 4, 8}, device()), k = Tensor::randn({2, 1, 6, 8}, device());
  const Tensor v = Tensor::randn({2, 1, 6, 8}, device());
  const Tensor out = nn::scaled_dot_product_attention(q, k, v, {}, 0.0, true);
  EXPECT_EQ(out.shape(), (Shape{2, 3, 4, 8}));
  for (int64_t h = 0; h < 3; ++h) {
    const Tensor head = nn::scaled_dot_product_attention(q.narrow(1, h, 1).squeeze(1), k.squeeze(1), v.squeeze(1), {},
                                                         0.0, true);
    testing::expect_close(out.narrow(1, h, 1).squeeze(1), head);
  }
  const Tensor none = Tensor::zeros({2, 6}, DType::Int64, device());
  const std::vector<float> values =
      nn::scaled_dot_product_attention(Tensor::randn({2, 4}, device()), Tensor::randn({6, 4}, device()),
                                       Tensor::randn({6, 3}, device()), none)
          .to_vector();
  for (float x : values) EXPECT_TRUE(std::isnan(x));
}

TEST_P(AttentionTest, GradientsReachQueryKeyValueAndAFloatMask) {
  gradcheck([](auto& in) { return nn::scaled_dot_product_attention(in[0], in[1], in[2]); },
            {input({2, 3, 4}), input({2, 5, 4}), input({2, 5, 3})});
  gradcheck([](auto& in) { return nn::scaled_dot_product_attention(in[0], in[1], in[2], {}, 0.0, true, 0.3); },
            {input({1, 2, 4, 4}), input({1, 2, 4, 4}), input({1, 2, 4, 2})});
  gradcheck([](auto& in) { return nn::scaled_dot_product_attention(in[0], in[1], in[2], in[3]); },
            {input({3, 4}), input({5, 4}), input({5, 2}), input({3, 5})});
}

TEST_P(AttentionTest, DropoutActsOnTheAttentionWeights) {
  const Tensor q = Tensor::randn({2, 3, 4}, device()), k = Tensor::randn({2, 5, 4}, device());
  const Tensor v = Tensor::randn({2, 5, 6}, device());
  manual_seed(21);
  const Tensor out = nn::scaled_dot_product_attention(q, k, v, {}, 0.4);
  manual_seed(21);
  const Tensor weights = nn::dropout(softmax(matmul(q, k.transpose(-2, -1)) * 0.5f, -1), 0.4);
  testing::expect_close(out, matmul(weights, v));
  EXPECT_GT(max_abs_diff(out, nn::scaled_dot_product_attention(q, k, v)), 1e-3);
}

// The fused op drops the probabilities with the mask that the reference path's nn::dropout draws for its weights:
// the same outputs and gradients from the same seed, and the generator left at the same place.
TEST_P(AttentionTest, FusedDropoutDrawsTheReferencePathsMask) {
  for (const bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "not causal");
    const Tensor q = input({2, 2, 19, 32}), k = input({2, 2, 23, 32}), v = input({2, 2, 23, 32});
    const Tensor w = Tensor::randn({2, 2, 19, 32}, device());
    const auto attend = [&](bool fused) {
      set_fused_attention_enabled(fused);
      manual_seed(21);
      for (const Tensor& t : {q, k, v}) t.set_grad(Tensor());
      const Tensor out = nn::scaled_dot_product_attention(q, k, v, {}, 0.3, causal);
      out.backward(w);
      const Tensor next = Tensor::rand({4}, device());
      set_fused_attention_enabled(true);
      EXPECT_EQ(out.grad_fn()->name() == "FusedAttentionBackward", fused);
      return std::vector<Tensor>{out.detach(), q.grad(), k.grad(), v.grad(), next};
    };
    const std::vector<Tensor> fused = attend(true), reference = attend(false);
    for (size_t i = 0; i < fused.size(); ++i) testing::expect_close(fused[i], reference[i], 1e-5, 1e-5);
    EXPECT_GT(max_abs_diff(fused[0], nn::scaled_dot_product_attention(q, k, v, {}, 0.0, causal)), 1e-2);
  }
}

TEST_P(AttentionTest, BadInputsAreErrors) {
  const Tensor q = Tensor::randn({2, 3, 4}, device()), k = Tensor::randn({2, 5, 4}, device());
  const Tensor v = Tensor::randn({2, 5, 6}, device());
  EXPECT_ERROR(nn::scaled_dot_product_attention(Tensor::randn({4}, device()), k, v),
               "nn::scaled_dot_product_attention: query has shape [4] but expected [..., L, E]");
  EXPECT_ERROR(nn::scaled_dot_product_attention(q, Tensor::randn({2, 5, 3}, device()), v), "but their E differ");
  EXPECT_ERROR(nn::scaled_dot_product_attention(q, k, Tensor::randn({2, 4, 6}, device())), "but their S differ");
  EXPECT_ERROR(nn::scaled_dot_product_attention(q, k, v, Tensor::zeros({3, 5}, device()), 0.0, true),
               "attn_mask and is_causal are both given");
  EXPECT_ERROR(nn::scaled_dot_product_attention(q, k, v, Tensor::zeros({4, 5}, device())),
               "attn_mask of shape [4, 5] does not broadcast to the scores' shape [2, 3, 5]");
  EXPECT_ERROR(nn::scaled_dot_product_attention(q, k, v, Tensor::zeros({3, 3, 5}, device())),
               "does not broadcast to the scores' shape");
  EXPECT_ERROR(nn::scaled_dot_product_attention(q, k, v, Tensor::zeros({3, 5}, DType::BFloat16, device())),
               "attn_mask is bfloat16 but expected int64");
  EXPECT_ERROR(nn::scaled_dot_product_attention(q, k, v, {}, 1.0), "dropout_p is 1 but expected a probability");
  EXPECT_ERROR(nn::scaled_dot_product_attention(q, k, v, {}, 0.0, false, std::nan("")), "scale is nan");
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(AttentionTest);

}  // namespace
}  // namespace tandem
