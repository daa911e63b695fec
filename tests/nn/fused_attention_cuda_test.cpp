// fused_attention's CUDA kernels (Note [Fused attention] in core/src/cuda/attention.h) against the reference path of
// nn::scaled_dot_product_attention (composed products and softmax, the scores stored), forward and all three
// gradients: the float32 kernels within float rounding, the bfloat16 tensor-core kernels within bfloat16 rounding of
// a float32 reference on the same (rounded) inputs. Head dims 32, 64 and 128, L != S, sizes that are no multiple of
// the tiles, causal or not, 3-D and 4-D batches, transposed head views, dropout; a CUDA graph capture. Every failure
// prints the largest absolute error, the largest reference value and the case.
#include <cmath>
#include <sstream>
#include <string>

#include "support/test_support.h"

namespace tandem {
namespace {

using testing::expect_near_relative;
using testing::kGpu;

struct Case {
  int64_t e, l, s;
  bool causal;
  bool four_d;
};

std::string describe(const Case& c) {
  std::ostringstream os;
  os << "E=" << c.e << " L=" << c.l << " S=" << c.s << (c.causal ? " causal" : "") << (c.four_d ? " 4-D" : " 3-D");
  return os.str();
}

struct Result {
  Tensor out, dq, dk, dv;
};

// Forward and backward of `attention` on fresh leaves copied from q, k, v, with cotangent w.
template <typename Fn>
Result run(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& w, Fn&& attention) {
  const Tensor ql = q.detach().clone().set_requires_grad(), kl = k.detach().clone().set_requires_grad();
  const Tensor vl = v.detach().clone().set_requires_grad();
  const Tensor out = attention(ql, kl, vl);
  out.to(DType::Float32).backward(w);
  return {out.detach(), ql.grad(), kl.grad(), vl.grad()};
}

class ReferencePath {
 public:
  ReferencePath() { set_fused_attention_enabled(false); }
  ~ReferencePath() { set_fused_attention_enabled(true); }
};

Result reference(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& w, double scale, bool causal) {
  const ReferencePath guard;
  return run(q, k, v, w, [&](const Tensor& a, const Tensor& b, const Tensor& c) {
    return nn::scaled_dot_product_attention(a, b, c, {}, 0.0, causal, scale);
  });
}

void expect_results(const Result& got, const Result& want, double out_tolerance, double grad_tolerance,
                    const std::string& what) {
  expect_near_relative(got.out, want.out, out_tolerance, what + ", out");
  expect_near_relative(got.dq, want.dq, grad_tolerance, what + ", dq");
  expect_near_relative(got.dk, want.dk, grad_tolerance, what + ", dk");
  expect_near_relative(got.dv, want.dv, grad_tolerance, what + ", dv");
}

std::vector<Case> cases() {
  std::vector<Case> all;
  const int64_t sizes[][2] = {{1, 1}, {17, 100}, {100, 17}, {64, 128}, {257, 257}, {130, 70}};
  for (const int64_t e : {32, 64, 128})
    for (const auto& ls : sizes)
      for (const bool causal : {false, true}) all.push_back({e, ls[0], ls[1], causal, (ls[0] + e) % 2 == 0});
  return all;
}

Shape shape_of(const Case& c, int64_t rows) { return c.four_d ? Shape{2, 3, rows, c.e} : Shape{3, rows, c.e}; }

class FusedAttentionCudaTest : public ::testing::Test {
 protected:
  void SetUp() override {
    TANDEM_REQUIRE_GPUS(1);
    manual_seed(3);
  }
};

TEST_F(FusedAttentionCudaTest, Float32MatchesTheReferencePath_CUDA) {
  for (const Case& c : cases()) {
    const Tensor q = Tensor::randn(shape_of(c, c.l), kGpu), k = Tensor::randn(shape_of(c, c.s), kGpu);
    const Tensor v = Tensor::randn(shape_of(c, c.s), kGpu), w = Tensor::randn(shape_of(c, c.l), kGpu);
    const double scale = 1.0 / std::sqrt(static_cast<double>(c.e));
    const Result got = run(q, k, v, w, [&](const Tensor& a, const Tensor& b, const Tensor& d) {
      return fused_attention(a, b, d, scale, c.causal, Precision::Float32);
    });
    expect_results(got, reference(q, k, v, w, scale, c.causal), 1e-5, 1e-5, "float32 " + describe(c));
  }
}

TEST_F(FusedAttentionCudaTest, Float32MatchesTheCpuLoops_CUDA) {
  for (const Case& c : {Case{64, 100, 37, true, true}, Case{128, 33, 80, false, false}}) {
    const Tensor q = Tensor::randn(shape_of(c, c.l)), k = Tensor::randn(shape_of(c, c.s));
    const Tensor v = Tensor::randn(shape_of(c, c.s)), w = Tensor::randn(shape_of(c, c.l));
    const auto fused = [&](const Tensor& a, const Tensor& b, const Tensor& d) {
      return fused_attention(a, b, d, 0.2, c.causal, Precision::Float32);
    };
    const Result cpu = run(q, k, v, w, fused);
    const Result gpu = run(q.to(kGpu), k.to(kGpu), v.to(kGpu), w.to(kGpu), fused);
    expect_results(gpu, cpu, 1e-5, 1e-5, "float32 vs CPU " + describe(c));
  }
}

// bfloat16 products: the reference runs in float32 on the same inputs rounded to bfloat16.
TEST_F(FusedAttentionCudaTest, BFloat16MatchesAFloat32Reference_CUDA) {
  for (const Case& c : cases()) {
    const auto rounded = [](const Tensor& t) { return t.to(DType::BFloat16).to(DType::Float32); };
    const Tensor q = rounded(Tensor::randn(shape_of(c, c.l), kGpu));
    const Tensor k = rounded(Tensor::randn(shape_of(c, c.s), kGpu));
    const Tensor v = rounded(Tensor::randn(shape_of(c, c.s), kGpu));
    const Tensor w = rounded(Tensor::randn(shape_of(c, c.l), kGpu));
    const double scale = 1.0 / std::sqrt(static_cast<double>(c.e));
    const Result want = reference(q, k, v, w, scale, c.causal);
    // float32 tensors, bfloat16 products (the mixed-precision model)...
    const Result mixed = run(q, k, v, w, [&](const Tensor& a, const Tensor& b, const Tensor& d) {
      return fused_attention(a, b, d, scale, c.causal, Precision::BFloat16);
    });
    expect_results(mixed, want, 2e-2, 3e-2, "bf16 products " + describe(c));
    // ... and bfloat16 tensors.
    const Result pure = run(q, k, v, w, [&](const Tensor& a, const Tensor& b, const Tensor& d) {
      return fused_attention(a.to(DType::BFloat16), b.to(DType::BFloat16), d.to(DType::BFloat16), scale, c.causal,
                             Precision::BFloat16);
    });
    EXPECT_EQ(pure.out.dtype(), DType::BFloat16);
    expect_results(pure, want, 2e-2, 3e-2, "bf16 tensors " + describe(c));
  }
}

TEST_F(FusedAttentionCudaTest, ReadsTransposedHeadViewsInPlace_CUDA) {
  const int64_t B = 2, T = 77, H = 3, D = 64;
  const auto heads = [&](const Tensor& x) { return x.reshape({B, T, H, D}).transpose(1, 2); };
  const Tensor x = Tensor::randn({B, T, H * D}, kGpu), y = Tensor::randn({B, T, H * D}, kGpu);
  const Tensor z = Tensor::randn({B, T, H * D}, kGpu), w = Tensor::randn({B, H, T, D}, kGpu);
  for (const Precision precision : {Precision::Float32, Precision::BFloat16}) {
    // bfloat16 products read bfloat16 head views in place (float32 ones are rounded into packed copies first).
    const DType dtype = precision == Precision::BFloat16 ? DType::BFloat16 : DType::Float32;
    const auto fused = [&](const Tensor& a, const Tensor& b, const Tensor& c) {
      return fused_attention(heads(a.to(dtype)), heads(b.to(dtype)), heads(c.to(dtype)), 0.125, true, precision);
    };
    const auto packed = [&](const Tensor& a, const Tensor& b, const Tensor& c) {
      return fused_attention(heads(a.to(dtype)).contiguous(), heads(b.to(dtype)).contiguous(),
                             heads(c.to(dtype)).contiguous(), 0.125, true, precision);
    };
    const Result got = run(x, y, z, w, fused), want = run(x, y, z, w, packed);
    expect_results(got, want, 1e-6, 1e-5, std::string("head views, ") + precision_name(precision));
    // Note [Outputs in their inputs' layout]: out is [B, T, H, D] in memory, as the heads' views are.
    EXPECT_TRUE(got.out.transpose(1, 2).is_contiguous());
    EXPECT_TRUE(want.out.is_contiguous());
  }
}

TEST_F(FusedAttentionCudaTest, ScaledDotProductAttentionTakesTheFusedPath_CUDA) {
  const Tensor q = Tensor::randn({2, 4, 50, 32}, kGpu).set_requires_grad();
  const Tensor out = nn::scaled_dot_product_attention(q, q, q, {}, 0.0, true);
  EXPECT_EQ(out.grad_fn()->name(), "FusedAttentionBackward");
  const ReferencePath guard;
  EXPECT_NE(nn::scaled_dot_product_attention(q, q, q, {}, 0.0, true).grad_fn()->name(), "FusedAttentionBackward");
}

TEST_F(FusedAttentionCudaTest, CapturedForwardAndBackwardReplayWithNewInputs_CUDA) {
  const Shape shape{2, 3, 200, 64};
  Tensor q = Tensor::randn(shape, kGpu).set_requires_grad();  // fed new values before the replay
  const Tensor k = Tensor::randn(shape, kGpu).set_requires_grad(), v = Tensor::randn(shape, kGpu).set_requires_grad();
  const Tensor w = Tensor::randn(shape, kGpu);
  for (const Precision precision : {Precision::Float32, Precision::BFloat16}) {
    SCOPED_TRACE(precision_name(precision));
    // Warm up the allocator and every kernel outside the capture.
    fused_attention(q, k, v, 0.125, true, precision).backward(w);
    for (const Tensor& t : {q, k, v}) t.grad().zero_();
    Tensor out;
    DeviceGraph graph;
    graph.begin_capture({kGpu});
    out = fused_attention(q, k, v, 0.125, true, precision);
    out.backward(w);
    graph.end_capture();
    {
      NoGradGuard no_grad;
      q.copy_(Tensor::randn(shape, kGpu));
    }
    for (const Tensor& t : {q, k, v}) t.grad().zero_();
    graph.replay();
    const Result want = run(q, k, v, w, [&](const Tensor& a, const Tensor& b, const Tensor& c) {
      return fused_attention(a, b, c, 0.125, true, precision);
    });
    expect_results({out, q.grad(), k.grad(), v.grad()}, want, 1e-6, 1e-6, "graph replay");
    for (const Tensor& t : {q, k, v}) t.grad().zero_();
  }
}

// Dropout in the kernels: the mask of the reference path's nn::dropout from the same seed (float32 within float
// rounding, bfloat16 products within bfloat16 rounding of the float32 reference on rounded inputs), and a captured
// graph that draws a new mask at each replay.
TEST_F(FusedAttentionCudaTest, DropoutDrawsTheReferencePathsMask_CUDA) {
  const auto rounded = [](const Tensor& t) { return t.to(DType::BFloat16).to(DType::Float32); };
  const Case shapes[] = {{64, 130, 70, true, true}, {32, 17, 100, false, false}, {128, 257, 257, true, true}};
  for (const Case& c : shapes) {
    const Tensor q = rounded(Tensor::randn(shape_of(c, c.l), kGpu));
    const Tensor k = rounded(Tensor::randn(shape_of(c, c.s), kGpu));
    const Tensor v = rounded(Tensor::randn(shape_of(c, c.s), kGpu));
    const Tensor w = rounded(Tensor::randn(shape_of(c, c.l), kGpu));
    const double scale = 1.0 / std::sqrt(static_cast<double>(c.e));
    manual_seed(9);
    const Result want = [&] {
      const ReferencePath guard;
      return run(q, k, v, w, [&](const Tensor& a, const Tensor& b, const Tensor& d) {
        return nn::scaled_dot_product_attention(a, b, d, {}, 0.25, c.causal, scale);
      });
    }();
    for (const Precision precision : {Precision::Float32, Precision::BFloat16}) {
      manual_seed(9);
      const Result got = run(q, k, v, w, [&](const Tensor& a, const Tensor& b, const Tensor& d) {
        return fused_attention(a, b, d, scale, c.causal, precision, 0.25);
      });
      const bool bf16 = precision == Precision::BFloat16;
      expect_results(got, want, bf16 ? 2e-2 : 1e-5, bf16 ? 3e-2 : 1e-5,
                     std::string("dropout, ") + precision_name(precision) + " " + describe(c));
    }
  }
  const Tensor x = Tensor::randn({2, 3, 200, 64}, kGpu);
  Tensor out;
  DeviceGraph graph;
  fused_attention(x, x, x, 0.125, true, Precision::BFloat16, 0.25);  // warm-up outside the capture
  graph.begin_capture({kGpu});
  out = fused_attention(x, x, x, 0.125, true, Precision::BFloat16, 0.25);
  graph.end_capture();
  graph.replay();
  const Tensor first = out.clone();
  graph.replay();
  EXPECT_GT(max_abs_diff(out.to(DType::Float32), first.to(DType::Float32)), 1e-2);
}

TEST_F(FusedAttentionCudaTest, RejectsUnsupportedHeadDims_CUDA) {
  const Tensor x = Tensor::randn({2, 5, 48}, kGpu);
  EXPECT_ERROR(fused_attention(x, x, x, 1.0), "fused_attention: head dim 48 is not supported (32, 64 or 128");
  EXPECT_ERROR(fused_attention(x, x, Tensor::randn({2, 5, 48}), 1.0), "fused_attention: expected all tensors on one");
}

}  // namespace
}  // namespace tandem
