// Precision modes (tandem/core/precision.h): names, the process-wide default, and linear() / linear_relu() in every
// precision on every device against float64 references of the rounded inputs; the gradients of the mixed-precision
// layer by its rule (Note [Linear in bfloat16] in core/src/ops.cpp), and the fused ReLU against relu(linear()).
#include "support/test_support.h"

#include <cmath>
#include <cstring>
#include <string>

namespace tandem {
namespace {

using testing::to_double;

// Sets allow_tf32() while alive.
using Tf32Switch = testing::ScopedSwitch<allow_tf32, set_allow_tf32>;

TEST(Precision, NamesParseAndPrint) {
  for (const Precision precision : {Precision::Float32, Precision::TF32, Precision::BFloat16}) {
    EXPECT_EQ(parse_precision(precision_name(precision)), precision);
    std::ostringstream printed;
    printed << precision;
    EXPECT_EQ(printed.str(), precision_name(precision));
  }
  EXPECT_STREQ(precision_name(Precision::Float32), "fp32");
  EXPECT_STREQ(precision_name(Precision::TF32), "tf32");
  EXPECT_STREQ(precision_name(Precision::BFloat16), "bf16");
  EXPECT_ERROR(parse_precision("fp16"), "parse_precision: got 'fp16' but expected fp32, tf32 or bf16");
  EXPECT_ERROR(parse_precision(""), "parse_precision: got '' but expected");
}

TEST(Precision, TheDefaultFollowsTheTf32Switch) {
  {
    Tf32Switch on(true);
    EXPECT_EQ(default_precision(), Precision::TF32);
  }
  Tf32Switch off(false);
  EXPECT_EQ(default_precision(), Precision::Float32);
}

// The reference's rounding of one input: to bfloat16 (BFloat16's own rounding), or to 10 mantissa bits, nearest
// with ties to even, written out here independently of the CPU backend's.
double rounded(float value, Precision precision) {
  switch (precision) {
    case Precision::Float32: return value;
    case Precision::BFloat16: return static_cast<float>(BFloat16(value));
    case Precision::TF32: {
      uint32_t bits;
      std::memcpy(&bits, &value, sizeof(bits));
      const uint32_t dropped = bits & 0x1FFFu;
      uint32_t kept = bits & ~uint32_t{0x1FFF};
      if (dropped > 0x1000u || (dropped == 0x1000u && (kept & 0x2000u) != 0)) kept += 0x2000u;
      float result;
      std::memcpy(&result, &kept, sizeof(result));
      return result;
    }
  }
  return value;
}

std::vector<double> rounded_values(const Tensor& t, Precision precision) {
  const std::vector<float> values = t.to_vector();
  std::vector<double> out(values.size());
  for (size_t i = 0; i < values.size(); ++i) out[i] = rounded(values[i], precision);
  return out;
}

// A float64 result and, per element, the sum of the magnitudes of the terms it adds up (its scale).
struct Expected {
  std::vector<double> value, scale;
};

// out[i][j] = sum_p a[i][p] * b[p][j] (+ bias[j]), a: [m, k] and b: [k, n] row-major.
Expected product(const std::vector<double>& a, const std::vector<double>& b, int64_t m, int64_t k, int64_t n,
                 const std::vector<double>& bias = {}) {
  Expected e{std::vector<double>(m * n, 0.0), std::vector<double>(m * n, 0.0)};
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double& value = e.value[i * n + j];
      double& scale = e.scale[i * n + j];
      if (!bias.empty()) {
        value += bias[j];
        scale += std::abs(bias[j]);
      }
      for (int64_t p = 0; p < k; ++p) {
        value += a[i * k + p] * b[p * n + j];
        scale += std::abs(a[i * k + p] * b[p * n + j]);
      }
    }
  return e;
}

std::vector<double> transposed(const std::vector<double>& a, int64_t rows, int64_t cols) {
  std::vector<double> t(a.size());
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) t[j * rows + i] = a[i * cols + j];
  return t;
}

void expect_within(const Tensor& actual, const Expected& expected, double rtol, const std::string& what) {
  ASSERT_TRUE(actual.defined()) << what;
  const std::vector<double> values = to_double(actual);
  ASSERT_EQ(values.size(), expected.value.size()) << what;
  for (size_t i = 0; i < values.size(); ++i)
    ASSERT_LE(std::abs(values[i] - expected.value[i]), rtol * expected.scale[i] + 1e-7)
        << what << " at flat index " << i << ": got " << values[i] << ", expected " << expected.value[i]
        << " (scale " << expected.scale[i] << ", on " << actual.device() << ")";
}

// Float32 sums of exact products: the products of two rounded inputs are exact in float32 (bf16 x bf16 has 16
// significant bits, tf32 x tf32 22), so the result differs from the float64 sum of the rounded inputs by float32
// summation error alone.
constexpr double kSummation = 2e-5;
// CUDA's TF32 tensor cores may truncate the inputs instead of rounding them to nearest: up to one more unit of the
// 10-bit mantissa per input, 2^-9 of each product.
constexpr double kTf32Truncation = 2.5e-3;

class PrecisionTest : public testing::EveryDevice {
 protected:
  double tolerance(Precision precision) const {
    return precision == Precision::TF32 && device().is_cuda() ? kTf32Truncation : kSummation;
  }
};

// linear(x, w, b, precision) and its gradients for the seed r, against the rule: y = x' w'^T + b,
// dx = g' w', dw = g'^T x', db = the row sums of g'^T, where ' is the precision's rounding and g = r (masked by
// y > 0 for linear_relu). In BFloat16 the gradient is rounded before the products; in TF32 the rounding happens
// inside them, so g' is g rounded the same way.
void check_linear(Device device, Precision precision, bool relu, double rtol) {
  SCOPED_TRACE(std::string(precision_name(precision)) + (relu ? " linear_relu" : " linear"));
  const int64_t batch = 37, in = 70, out = 45;
  manual_seed(3);
  Tensor x = Tensor::randn({batch, in}, device).set_requires_grad();
  Tensor w = Tensor::randn({out, in}, device).set_requires_grad();
  Tensor b = Tensor::randn({out}, device).set_requires_grad();
  const Tensor r = Tensor::randn({batch, out}, device);

  Tensor y = relu ? linear_relu(x, w, b, precision) : linear(x, w, b, precision);
  const std::vector<double> xs = rounded_values(x, precision), ws = rounded_values(w, precision);
  Expected ref_y = product(xs, transposed(ws, out, in), batch, in, out, to_double(b));
  if (relu)
    for (double& v : ref_y.value) v = std::max(v, 0.0);
  expect_within(y, ref_y, rtol, "y");

  y.backward(r);
  // The mask is read from the output computed here (an element at 0 within rounding would flip it otherwise).
  const std::vector<double> ys = to_double(y);
  std::vector<float> masked = r.to_vector();
  if (relu)
    for (size_t i = 0; i < masked.size(); ++i) masked[i] = ys[i] > 0.0 ? masked[i] : 0.0f;
  const std::vector<double> gs = rounded_values(Tensor::from_vector(masked, {batch, out}), precision);
  expect_within(x.grad(), product(gs, ws, batch, out, in), rtol, "dx");
  expect_within(w.grad(), product(transposed(gs, batch, out), xs, out, batch, in), rtol, "dw");
  // The bias gradient sums g as the products read it: rounded in BFloat16, where g is rounded before the products,
  // and as it is in TF32, where the rounding happens inside them.
  const std::vector<double> ones(batch, 1.0);
  const std::vector<double> summed =
      precision == Precision::BFloat16 ? gs : rounded_values(Tensor::from_vector(masked, {batch, out}), Precision::Float32);
  expect_within(b.grad(), product(ones, summed, 1, batch, out), rtol, "db");
}

TEST_P(PrecisionTest, LinearMatchesFloat64OfTheRoundedInputs) {
  for (const Precision precision : {Precision::Float32, Precision::TF32, Precision::BFloat16})
    for (const bool relu : {false, true}) check_linear(device(), precision, relu, tolerance(precision));
}

TEST_P(PrecisionTest, BFloat16DiffersFromFloat32ByTheRounding) {
  // The mixed-precision result is not the float32 one: a test of the rounding that could not fail otherwise.
  manual_seed(4);
  const Tensor x = Tensor::randn({16, 64}, device());
  const Tensor w = Tensor::randn({8, 64}, device());
  const double difference = max_abs_diff(linear(x, w, Tensor(), Precision::BFloat16),
                                         linear(x, w, Tensor(), Precision::Float32));
  EXPECT_GT(difference, 1e-3);
  EXPECT_LT(difference, 0.5);
}

TEST_P(PrecisionTest, AnExplicitPrecisionWinsOverTheSwitch) {
  manual_seed(6);
  const Tensor x = Tensor::randn({9, 33}, device());
  const Tensor w = Tensor::randn({7, 33}, device());
  const Tensor b = Tensor::randn({7}, device());
  Tensor plain, tf32;
  {
    Tf32Switch off(false);
    plain = linear(x, w, b);
    tf32 = linear(x, w, b, Precision::TF32);
  }
  Tf32Switch on(true);
  EXPECT_EQ(linear(x, w, b, Precision::Float32).to_vector(), plain.to_vector());
  EXPECT_EQ(linear(x, w, b).to_vector(), tf32.to_vector()) << "no precision given: the switch's TF32";
  if (device().is_cpu()) EXPECT_NE(plain.to_vector(), tf32.to_vector()) << "the CPU emulates TF32";
}

TEST_P(PrecisionTest, AWeightChangedInPlaceIsRoundedAfresh) {
  manual_seed(8);
  const Tensor x = Tensor::randn({5, 12}, device());
  Tensor w = Tensor::randn({3, 12}, device());
  const Tensor first = linear(x, w, Tensor(), Precision::BFloat16);
  w.mul_(2.0f);  // exact in bfloat16 too
  const Tensor second = linear(x, w, Tensor(), Precision::BFloat16);
  const std::vector<float> a = first.to_vector(), b = second.to_vector();
  for (size_t i = 0; i < a.size(); ++i) EXPECT_FLOAT_EQ(b[i], 2.0f * a[i]) << i;
}

TEST_P(PrecisionTest, LinearReluGivesReluOfLinear) {
  for (const Precision precision : {Precision::Float32, Precision::BFloat16}) {
    SCOPED_TRACE(precision_name(precision));
    manual_seed(9);
    Tensor x = Tensor::randn({29, 40}, device()).set_requires_grad();
    Tensor w = Tensor::randn({31, 40}, device()).set_requires_grad();
    Tensor b = Tensor::randn({31}, device()).set_requires_grad();
    const Tensor r = Tensor::randn({29, 31}, device());
    Tensor fused = linear_relu(x, w, b, precision);
    EXPECT_EQ(fused.grad_fn()->name(), "LinearReluBackward");
    fused.backward(r);
    const Tensor dx = x.grad(), dw = w.grad(), db = b.grad();
    x.set_grad(Tensor());
    w.set_grad(Tensor());
    b.set_grad(Tensor());
    Tensor separate = relu(linear(x, w, b, precision));
    separate.backward(r);
    if (device().is_cpu()) {  // the same products and the same mask: bit for bit
      EXPECT_EQ(fused.to_vector(), separate.to_vector());
      EXPECT_EQ(dx.to_vector(), x.grad().to_vector());
      EXPECT_EQ(dw.to_vector(), w.grad().to_vector());
      EXPECT_EQ(db.to_vector(), b.grad().to_vector());
    } else {  // cuBLASLt's epilogue kernel may sum in another order
      testing::expect_close(fused, separate, 1e-5, 1e-5);
      testing::expect_close(dx, x.grad(), 1e-5, 1e-5);
      testing::expect_close(dw, w.grad(), 1e-5, 1e-5);
      testing::expect_close(db, b.grad(), 1e-5, 1e-5);
    }
  }
}

TEST_P(PrecisionTest, LinearReluChecksItsInputsUnderItsName) {
  const Tensor x = Tensor::randn({4, 3}, device());
  EXPECT_ERROR(linear_relu(x, Tensor::randn({2, 5}, device()), Tensor()), "linear_relu: input has shape [4, 3]");
  EXPECT_ERROR(linear_relu(x, Tensor::randn({2, 3}, device()), Tensor::randn({3}, device())),
               "linear_relu: bias has shape [3] but expected [2]");
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(PrecisionTest);

}  // namespace
}  // namespace tandem
