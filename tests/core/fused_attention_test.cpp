// fused_attention on the CPU: its values against a float64 computation of the definition, its gradients by finite
// differences (which check the backward node and the CPU backend's loops, the reference for the CUDA kernels), and
// its documented errors.
#include <cmath>
#include <limits>

#include "support/test_support.h"

namespace tandem {
namespace {

using testing::gradcheck;
using testing::to_double;

// softmax(scale q k^T, causal) v in float64 for q [N, L, E], k and v [N, S, E].
std::vector<double> definition(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool causal) {
  const int64_t N = q.size(0), L = q.size(1), E = q.size(2), S = k.size(1);
  const std::vector<double> qv = to_double(q), kv = to_double(k), vv = to_double(v);
  std::vector<double> out;
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t i = 0; i < L; ++i) {
      std::vector<double> p(static_cast<size_t>(S));
      double largest = -std::numeric_limits<double>::infinity(), total = 0;
      for (int64_t j = 0; j < S; ++j) {
        double dot = 0;
        for (int64_t e = 0; e < E; ++e) dot += qv[(n * L + i) * E + e] * kv[(n * S + j) * E + e];
        p[j] = causal && j > i ? -std::numeric_limits<double>::infinity() : dot * scale;
        largest = std::max(largest, p[j]);
      }
      for (double& x : p) total += (x = std::exp(x - largest));
      for (int64_t e = 0; e < E; ++e) {
        double value = 0;
        for (int64_t j = 0; j < S; ++j) value += p[j] / total * vv[(n * S + j) * E + e];
        out.push_back(value);
      }
    }
  }
  return out;
}

class FusedAttentionCpuTest : public ::testing::Test {
 protected:
  void SetUp() override { manual_seed(5); }
};

TEST_F(FusedAttentionCpuTest, MatchesTheDefinition) {
  const Tensor q = Tensor::randn({2, 3, 32}), k = Tensor::randn({2, 5, 32}), v = Tensor::randn({2, 5, 32});
  testing::expect_values(fused_attention(q, k, v, 0.2), definition(q, k, v, 0.2, false), {2, 3, 32});
  testing::expect_values(fused_attention(q, k, v, 0.2, true), definition(q, k, v, 0.2, true), {2, 3, 32});
}

TEST_F(FusedAttentionCpuTest, GradientsMatchFiniteDifferences) {
  for (const bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "not causal");
    const Tensor q = (Tensor::randn({2, 4, 32}) * 0.5f).set_requires_grad();
    const Tensor k = (Tensor::randn({2, 3, 32}) * 0.5f).set_requires_grad();
    const Tensor v = Tensor::randn({2, 3, 32}).set_requires_grad();
    gradcheck([&](const std::vector<Tensor>& in) { return fused_attention(in[0], in[1], in[2], 0.4, causal); },
              {q, k, v});
    // One tensor as q, k and v (their gradients must not share memory), and heads split from one projection
    // (Note [Gradients of packed heads]: their gradients are written into one tensor that split takes as it is).
    gradcheck([&](const std::vector<Tensor>& in) { return fused_attention(in[0], in[0], in[0], 0.4, causal); }, {q});
    const Tensor x = (Tensor::randn({2, 3, 3 * 2 * 32}) * 0.5f).set_requires_grad();
    gradcheck(
        [&](const std::vector<Tensor>& in) {
          std::vector<Tensor> heads = in[0].split({64, 64, 64}, 2);
          for (Tensor& part : heads) part = part.reshape({2, 3, 2, 32}).transpose(1, 2);
          return fused_attention(heads[0], heads[1], heads[2], 0.4, causal);
        },
        {x});
  }
}

TEST_F(FusedAttentionCpuTest, ReadsTransposedHeadsInPlaceWithTheSameValues) {
  // [B, T, H, E] viewed as [B, H, T, E], as a multi-head layer makes them.
  const Tensor x = Tensor::randn({2, 6, 3 * 32});
  const Tensor heads = x.reshape({2, 6, 3, 32}).transpose(1, 2);
  const Tensor packed = heads.contiguous();
  testing::expect_close(fused_attention(heads, heads, heads, 0.3, true),
                        fused_attention(packed, packed, packed, 0.3, true), 1e-6, 1e-7);
}

// Note [Outputs in their inputs' layout]: heads split from one [B, T, 3 H E] projection give an out laid out as
// [B, T, H, E] and gradients that reach the projection with the values of contiguous heads.
TEST_F(FusedAttentionCpuTest, OutputAndGradientsKeepTheHeadsLayout) {
  const int64_t B = 2, T = 5, H = 2, E = 32;
  const Tensor x = Tensor::randn({B, T, 3 * H * E}), w = Tensor::randn({B, H, T, E});
  const auto attend = [&](bool packed) {
    const Tensor leaf = x.detach().clone().set_requires_grad();
    std::vector<Tensor> heads = leaf.split({H * E, H * E, H * E}, 2);
    for (Tensor& part : heads) {
      part = part.reshape({B, T, H, E}).transpose(1, 2);
      if (packed) part = part.contiguous();
    }
    const Tensor out = fused_attention(heads[0], heads[1], heads[2], 0.3, true);
    sum(out * w).backward();
    return std::make_pair(out.detach(), leaf.grad());
  };
  const auto [out, grad] = attend(false);
  const auto [packed_out, packed_grad] = attend(true);
  EXPECT_TRUE(out.transpose(1, 2).is_contiguous());
  EXPECT_TRUE(packed_out.is_contiguous());
  testing::expect_close(out, packed_out, 1e-6, 1e-7);
  testing::expect_close(grad, packed_grad, 1e-6, 1e-7);
}

TEST_F(FusedAttentionCpuTest, ARowWithoutKeysIsNaN) {
  const Tensor q = Tensor::randn({1, 2, 32}), kv = Tensor::randn({1, 0, 32});
  const std::vector<double> out = to_double(fused_attention(q, kv, kv, 1.0));
  for (const double x : out) EXPECT_TRUE(std::isnan(x));
}

TEST_F(FusedAttentionCpuTest, RejectsWhatItDoesNotCompute) {
  const Tensor q = Tensor::randn({2, 3, 32}), k = Tensor::randn({2, 5, 32});
  EXPECT_ERROR(fused_attention(q, k, Tensor::zeros({2, 5, 32}).to(DType::Int64), 1.0),
               "fused_attention: v is int64 but expected float32 or bfloat16");
  EXPECT_ERROR(fused_attention(q.to(DType::BFloat16), k, k, 1.0), "expected one dtype");
  EXPECT_ERROR(fused_attention(q, Tensor::randn({3, 5, 32}), Tensor::randn({3, 5, 32}), 1.0),
               "have different batch dims");
  EXPECT_ERROR(fused_attention(q, k, Tensor::randn({2, 4, 32}), 1.0), "their S differ");
  EXPECT_ERROR(fused_attention(q, k, Tensor::randn({2, 5, 64}), 1.0), "head dims 32, 32 and 64");
  EXPECT_ERROR(fused_attention(Tensor::randn({2, 3, 16}), Tensor::randn({2, 5, 16}), Tensor::randn({2, 5, 16}), 1.0),
               "fused_attention: head dim 16 is not supported (32, 64 or 128");
  EXPECT_ERROR(fused_attention(Tensor::randn({32}), k, k, 1.0), "q has shape [32] but expected [..., L, E]");
  EXPECT_ERROR(fused_attention(q, k, k, std::numeric_limits<double>::infinity()), "scale is inf");
  EXPECT_ERROR(fused_attention(Tensor(), k, k, 1.0), "fused_attention");
}

}  // namespace
}  // namespace tandem
