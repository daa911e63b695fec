// linear() against float64 references on every device, in its fused form (Note [Fused linear backward]: on CUDA
// the cuBLASLt bias and bias-gradient epilogues, and on every device the weight gradient written into an existing
// .grad) and its plain form: forward and backward for odd sizes, batch 1, no bias, a frozen weight, non-contiguous
// inputs and gradients and a misaligned bias; gradients accumulated over backward calls into views of one flat
// buffer, with their hooks; a weight used twice; the two forms against each other; and TF32 within its tolerance.
#include "support/test_support.h"

#include <cmath>
#include <string>

namespace tandem {
namespace {

using testing::to_double;

using FusedLinear = testing::ScopedSwitch<fused_linear, set_fused_linear>;
using Tf32 = testing::ScopedSwitch<allow_tf32, set_allow_tf32>;

// Tolerances relative to an element's scale, the sum of the magnitudes of the terms it adds up.
constexpr double kFloat32 = 2e-5;  // float32 sums of up to a few hundred terms
constexpr double kTf32 = 4e-3;     // TF32 keeps 10 mantissa bits of each factor: under 2^-9 per product

struct Expected {
  std::vector<double> value;
  std::vector<double> scale;
};

// linear(x, w, b) and the gradients of sum(linear(x, w, b) * r) with respect to x, w and b, in float64.
struct Reference {
  Expected y, dx, dw, db;
};

Reference reference(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& r) {
  const int64_t batch = x.size(0), in = x.size(1), out = w.size(0);
  const std::vector<double> xs = to_double(x), ws = to_double(w), rs = to_double(r);
  const std::vector<double> bs = b.defined() ? to_double(b) : std::vector<double>(out, 0.0);
  const auto sized = [](int64_t n) { return Expected{std::vector<double>(n, 0.0), std::vector<double>(n, 0.0)}; };
  const auto add = [](Expected& e, int64_t at, double term) {
    e.value[at] += term;
    e.scale[at] += std::abs(term);
  };
  Reference ref{sized(batch * out), sized(batch * in), sized(out * in), sized(out)};
  for (int64_t i = 0; i < batch; ++i) {
    for (int64_t o = 0; o < out; ++o) {
      const double g = rs[i * out + o];
      add(ref.y, i * out + o, bs[o]);
      add(ref.db, o, g);
      for (int64_t p = 0; p < in; ++p) {
        add(ref.y, i * out + o, xs[i * in + p] * ws[o * in + p]);
        add(ref.dx, i * in + p, g * ws[o * in + p]);
        add(ref.dw, o * in + p, g * xs[i * in + p]);
      }
    }
  }
  return ref;
}

// Expects every element of `actual` within rtol * scale (+ 1e-6) of the reference, and `actual` of shape `shape`.
void expect_within(const Tensor& actual, const Expected& expected, const Shape& shape, double rtol,
                   const std::string& what) {
  ASSERT_TRUE(actual.defined()) << what;
  ASSERT_EQ(to_string(actual.shape()), to_string(shape)) << what;
  const std::vector<double> values = to_double(actual);
  ASSERT_EQ(values.size(), expected.value.size()) << what;
  for (size_t i = 0; i < values.size(); ++i) {
    ASSERT_LE(std::abs(values[i] - expected.value[i]), rtol * expected.scale[i] + 1e-6)
        << what << " at flat index " << i << ": got " << values[i] << ", expected " << expected.value[i] << " (scale "
        << expected.scale[i] << ", on " << actual.device() << ")";
  }
}

enum class Layout { Contiguous, RowStrided, Transposed };

struct LinearCase {
  std::string name;
  int64_t batch, in, out;
  bool bias = true;
  Layout x_layout = Layout::Contiguous;
  bool transposed_gradient = false;  // the gradient that seeds backward is a transposed view
  bool misaligned_bias = false;      // the bias starts one float into its storage
  bool frozen_weight = false;        // the weight does not require grad
};

const std::vector<LinearCase>& cases() {
  static const std::vector<LinearCase> all = {
      {"odd sizes", 37, 129, 65},
      {"batch 1", 1, 7, 5},
      {"no bias", 64, 96, 33, false},
      {"one input feature", 5, 1, 3},
      {"one output feature", 4, 6, 1},
      {"larger", 130, 70, 257},
      {"row-strided input", 23, 40, 17, true, Layout::RowStrided},
      {"transposed input", 23, 40, 17, true, Layout::Transposed},
      {"transposed gradient", 31, 24, 18, true, Layout::Contiguous, true},
      {"misaligned bias", 19, 24, 13, true, Layout::Contiguous, false, true},
      {"frozen weight", 17, 12, 9, true, Layout::Contiguous, false, false, true},
  };
  return all;
}

// What one case computed: the output and the gradients of x, w and b (undefined where none).
struct Results {
  Tensor y, dx, dw, db;
};

// Runs `c` forward and backward on `device` and checks the results against the float64 reference within `rtol`.
// When `weight_grad` is defined it is installed as the weight's .grad first (and the reference adds it).
Results run_case(const LinearCase& c, Device device, double rtol, const Tensor& weight_grad = {}) {
  SCOPED_TRACE(c.name);
  manual_seed(11);
  Tensor x_leaf = c.x_layout == Layout::RowStrided   ? Tensor::randn({c.batch, c.in + 3}, device)
                  : c.x_layout == Layout::Transposed ? Tensor::randn({c.in, c.batch}, device)
                                                     : Tensor::randn({c.batch, c.in}, device);
  x_leaf.set_requires_grad();
  const auto as_input = [&](const Tensor& t) {
    return c.x_layout == Layout::RowStrided ? t.narrow(1, 2, c.in) : c.x_layout == Layout::Transposed ? t.t() : t;
  };
  const Tensor x = as_input(x_leaf);
  Tensor w = Tensor::randn({c.out, c.in}, device);
  if (!c.frozen_weight) w.set_requires_grad();
  Tensor b_leaf = c.bias ? Tensor::randn({c.misaligned_bias ? c.out + 1 : c.out}, device) : Tensor();
  if (c.bias) b_leaf.set_requires_grad();
  const Tensor b = c.misaligned_bias ? b_leaf.narrow(0, 1, c.out) : b_leaf;
  const Tensor r =
      c.transposed_gradient ? Tensor::randn({c.out, c.batch}, device).t() : Tensor::randn({c.batch, c.out}, device);
  Reference ref = reference(x, w, b, r);
  if (weight_grad.defined()) {
    w.set_grad(weight_grad);
    const std::vector<double> before = to_double(weight_grad);
    for (size_t i = 0; i < before.size(); ++i) {
      ref.dw.value[i] += before[i];
      ref.dw.scale[i] += std::abs(before[i]);
    }
  }

  Results results;
  results.y = linear(x, w, b);
  expect_within(results.y, ref.y, {c.batch, c.out}, rtol, "y");
  results.y.backward(r);
  results.dx = as_input(x_leaf.grad());
  expect_within(results.dx, ref.dx, {c.batch, c.in}, rtol, "dx");
  if (c.frozen_weight) {
    EXPECT_FALSE(w.grad().defined());
  } else {
    results.dw = w.grad();
    expect_within(results.dw, ref.dw, {c.out, c.in}, rtol, "dw");
    if (weight_grad.defined()) EXPECT_TRUE(results.dw.is_same(weight_grad)) << "the weight keeps its .grad";
  }
  if (c.bias) {
    results.db = c.misaligned_bias ? b_leaf.grad().narrow(0, 1, c.out) : b_leaf.grad();
    expect_within(results.db, ref.db, {c.out}, rtol, "db");
  }
  return results;
}

void expect_same_values(const Tensor& a, const Tensor& b, const char* what) {
  ASSERT_EQ(a.defined(), b.defined()) << what;
  if (a.defined()) EXPECT_EQ(a.to_vector(), b.to_vector()) << what;
}

class FusedLinearTest : public testing::EveryDevice {};

TEST_P(FusedLinearTest, FusedAndPlainFormsMatchFloat64) {
  for (const bool fused : {true, false}) {
    SCOPED_TRACE(fused ? "fused" : "plain");
    FusedLinear form(fused);
    for (const LinearCase& c : cases()) {
      run_case(c, device(), kFloat32);
      if (c.frozen_weight) continue;
      manual_seed(5);  // a .grad to accumulate onto: the fused form writes the weight gradient into it
      run_case(c, device(), kFloat32, Tensor::randn({c.out, c.in}, device()));
    }
  }
}

TEST_P(FusedLinearTest, FusedAndPlainFormsGiveTheSameValuesOnTheCpu) {
  if (device().is_cuda()) GTEST_SKIP() << "on CUDA the two forms agree to float rounding (checked above)";
  for (const LinearCase& c : cases()) {
    manual_seed(5);
    const Tensor grad = Tensor::randn({c.out, c.in}, device());
    Results fused, plain;
    {
      FusedLinear form(true);
      fused = run_case(c, device(), kFloat32, c.frozen_weight ? Tensor() : grad.clone());
    }
    {
      FusedLinear form(false);
      plain = run_case(c, device(), kFloat32, c.frozen_weight ? Tensor() : grad.clone());
    }
    SCOPED_TRACE(c.name);
    expect_same_values(fused.y, plain.y, "y");
    expect_same_values(fused.dx, plain.dx, "dx");
    expect_same_values(fused.dw, plain.dw, "dw");
    expect_same_values(fused.db, plain.db, "db");
  }
}

TEST_P(FusedLinearTest, Tf32StaysWithinItsTolerance) {  // the CPU emulates TF32 (Note [Precision modes])
  Tf32 tf32(true);
  for (const bool fused : {true, false}) {
    SCOPED_TRACE(fused ? "fused" : "plain");
    FusedLinear form(fused);
    for (const LinearCase& c : cases()) {
      run_case(c, device(), kTf32);
      if (!c.frozen_weight) run_case(c, device(), kTf32, Tensor::zeros({c.out, c.in}, device()));
    }
    run_case({"wide", 256, 512, 384}, device(), kTf32, Tensor::zeros({384, 512}, device()));
    // Wide enough that on a GPU the weight gradient reads a row-major copy of the output gradient's transpose, whose
    // pass also sums the bias gradient (Note [TF32 operands along k] in gemm.cpp); a batch that leaves a partial tile.
    run_case({"wider", 100, 1040, 40}, device(), kTf32, Tensor::zeros({40, 1040}, device()));
    run_case({"wider, no bias", 100, 1040, 40, false}, device(), kTf32);
  }
}

TEST_P(FusedLinearTest, GradientsAccumulateIntoViewsOfAFlatBufferAndTheHooksRun) {
  FusedLinear form(true);
  manual_seed(3);
  const int64_t batch = 33, in = 20, out = 12;
  Tensor w = Tensor::randn({out, in}, device()).set_requires_grad();
  Tensor b = Tensor::randn({out}, device()).set_requires_grad();
  // As a data-parallel module installs them: views into one buffer, holding values from an earlier step.
  const Tensor buffer = Tensor::randn({out * in + out + 5}, device());
  const std::vector<double> before = to_double(buffer);
  const Tensor w_grad = buffer.narrow(0, 0, out * in).view({out, in});
  const Tensor b_grad = buffer.narrow(0, out * in, out);
  w.set_grad(w_grad);
  b.set_grad(b_grad);
  std::vector<std::vector<float>> w_seen;  // w.grad() each time w's hook ran
  std::string hooks;                       // which hooks ran, in order
  w.register_post_accumulate_grad_hook([&](const Tensor& leaf) {
    w_seen.push_back(leaf.grad().to_vector());
    hooks += 'w';
  });
  b.register_post_accumulate_grad_hook([&](const Tensor&) { hooks += 'b'; });

  Expected dw{std::vector<double>(before.begin(), before.begin() + out * in), {}};
  Expected db{std::vector<double>(before.begin() + out * in, before.begin() + out * in + out), {}};
  for (const double value : dw.value) dw.scale.push_back(std::abs(value));
  for (const double value : db.value) db.scale.push_back(std::abs(value));
  std::vector<Expected> dw_after_step;
  for (int step = 0; step < 2; ++step) {
    const Tensor x = Tensor::randn({batch, in}, device());
    const Tensor r = Tensor::randn({batch, out}, device());
    const Reference ref = reference(x, w, b, r);
    for (size_t i = 0; i < dw.value.size(); ++i) {
      dw.value[i] += ref.dw.value[i];
      dw.scale[i] += ref.dw.scale[i];
    }
    for (size_t i = 0; i < db.value.size(); ++i) {
      db.value[i] += ref.db.value[i];
      db.scale[i] += ref.db.scale[i];
    }
    dw_after_step.push_back(dw);
    linear(x, w, b).backward(r);
  }
  EXPECT_TRUE(w.grad().is_same(w_grad));
  EXPECT_TRUE(b.grad().is_same(b_grad));
  expect_within(w.grad(), dw, {out, in}, kFloat32, "dw");
  expect_within(b.grad(), db, {out}, kFloat32, "db");
  const std::vector<double> after = to_double(buffer);
  for (size_t i = out * in + out; i < after.size(); ++i) EXPECT_EQ(after[i], before[i]) << "outside the views";
  // The weight gradient is written while LinearBackward runs, before the bias's accumulator adds its gradient.
  EXPECT_EQ(hooks, "wbwb");
  ASSERT_EQ(w_seen.size(), 2u);
  for (size_t step = 0; step < 2; ++step) {
    expect_within(Tensor::from_vector(w_seen[step], {out, in}), dw_after_step[step], {out, in}, kFloat32,
                  "dw as the hook saw it");
  }

  // Zeroed in place, the views take the next gradient alone.
  autograd::zero_grad({w, b}, /*set_to_none=*/false);
  const Tensor x = Tensor::randn({batch, in}, device());
  const Tensor r = Tensor::randn({batch, out}, device());
  const Reference ref = reference(x, w, b, r);
  linear(x, w, b).backward(r);
  expect_within(w.grad(), ref.dw, {out, in}, kFloat32, "dw after zero_grad");
  expect_within(b.grad(), ref.db, {out}, kFloat32, "db after zero_grad");
  EXPECT_EQ(w_seen.size(), 3u);
}

TEST_P(FusedLinearTest, AWeightUsedTwiceGetsBothGradients) {
  FusedLinear form(true);
  manual_seed(9);
  const int64_t batch = 6, in = 5, out = 4;
  Tensor w = Tensor::randn({out, in}, device()).set_requires_grad();
  Tensor b = Tensor::randn({out}, device()).set_requires_grad();
  w.set_grad(Tensor::zeros({out, in}, device()));
  int w_hooks = 0;
  w.register_post_accumulate_grad_hook([&](const Tensor&) { ++w_hooks; });
  const Tensor x1 = Tensor::randn({batch, in}, device());
  const Tensor x2 = Tensor::randn({batch, in}, device());
  const Tensor r = Tensor::randn({batch, out}, device());
  (linear(x1, w, b) + linear(x2, w, b)).backward(r);
  Reference first = reference(x1, w, b, r);
  const Reference second = reference(x2, w, b, r);
  for (size_t i = 0; i < first.dw.value.size(); ++i) {
    first.dw.value[i] += second.dw.value[i];
    first.dw.scale[i] += second.dw.scale[i];
  }
  for (size_t i = 0; i < first.db.value.size(); ++i) {
    first.db.value[i] *= 2;
    first.db.scale[i] *= 2;
  }
  expect_within(w.grad(), first.dw, {out, in}, kFloat32, "dw");
  expect_within(b.grad(), first.db, {out}, kFloat32, "db");
  EXPECT_EQ(w_hooks, 1) << "the two gradients meet in the accumulator";
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(FusedLinearTest);

}  // namespace
}  // namespace tandem
