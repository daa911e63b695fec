// The CUDA backend against the CPU backend on inputs large enough to take each kernel path: vectorized and
// unaligned contiguous elementwise work, row-broadcast and general strided layouts, every sum_dim strategy,
// single-pass and multi-block deterministic reductions, cuBLAS products of transposed views, small products through
// cuBLASLt, tiny outputs over a long k in one kernel, and peer copies between GPUs.

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "support/test_support.h"

namespace tandem {
namespace {

using testing::expect_close;
using FusedLinear = testing::ScopedSwitch<fused_linear, set_fused_linear>;

const Device kCpu = Device::cpu();
using testing::kGpu;

// The same values on the CPU and on the first GPU.
struct Pair {
  Tensor cpu;
  Tensor gpu;
};
Pair randn_pair(const Shape& shape) {
  Tensor cpu = Tensor::randn(shape, kCpu);
  return {cpu, cpu.to(kGpu)};
}
Pair rand_pair(const Shape& shape) {
  Tensor cpu = Tensor::rand(shape, kCpu);
  return {cpu, cpu.to(kGpu)};
}

TEST(CudaKernelsCUDA, ContiguousElementwiseWithAndWithoutAlignment) {
  TANDEM_REQUIRE_GPUS(1);
  const int64_t n = 1000003;  // not a multiple of 4: the vectorized kernel's tail is used
  Pair a = randn_pair({n});
  Pair b = randn_pair({n});
  expect_close(a.gpu + b.gpu, a.cpu + b.cpu);
  expect_close(a.gpu - b.gpu, a.cpu - b.cpu);
  expect_close(a.gpu * b.gpu, a.cpu * b.cpu);
  expect_close(relu(a.gpu), relu(a.cpu));
  expect_close(tanh(a.gpu), tanh(a.cpu));
  expect_close(a.gpu * 0.25f, a.cpu * 0.25f);
  // Views starting one and two floats in are not 16-byte aligned: the scalar kernel runs.
  const int64_t m = n - 2;
  expect_close(a.gpu.narrow(0, 1, m) + b.gpu.narrow(0, 2, m), a.cpu.narrow(0, 1, m) + b.cpu.narrow(0, 2, m));
}

TEST(CudaKernelsCUDA, BroadcastAndStridedElementwise) {
  TANDEM_REQUIRE_GPUS(1);
  Pair x = randn_pair({513, 77});
  Pair bias = randn_pair({77});
  Pair column = randn_pair({513, 1});
  expect_close(x.gpu + bias.gpu, x.cpu + bias.cpu);      // row broadcast as the second input
  expect_close(bias.gpu - x.gpu, bias.cpu - x.cpu);      // row broadcast as the first input
  expect_close(x.gpu * column.gpu, x.cpu * column.cpu);  // column broadcast: general strided kernel
  Pair y = randn_pair({77, 513});
  expect_close(x.gpu.t() * y.gpu, x.cpu.t() * y.cpu);  // a transposed view
  expect_close(x.gpu.t().contiguous(), x.cpu.t().contiguous());
  Pair cube = randn_pair({6, 1, 5, 1, 4});
  Pair other = randn_pair({3, 1, 2, 1});
  expect_close(cube.gpu + other.gpu, cube.cpu + other.cpu);  // [6, 3, 5, 2, 4]
}

// Every pointwise function runs on the one elementwise engine (Note [One elementwise engine] in elementwise.cu): a
// few beyond + - *, with a row broadcast and three inputs, and in-place accumulation on each path, bitwise the CPU's.
TEST(CudaKernelsCUDA, PointwiseFunctionsOnEveryPathOfTheEngine) {
  TANDEM_REQUIRE_GPUS(1);
  Pair x = randn_pair({513, 77});
  Pair bias = rand_pair({77});
  expect_close(x.gpu / (bias.gpu + 1.0f), x.cpu / (bias.cpu + 1.0f));                        // row broadcast, Div
  expect_close(where(x.gpu > 0.0f, x.gpu, bias.gpu), where(x.cpu > 0.0f, x.cpu, bias.cpu));  // three inputs
  expect_close(clamp(x.gpu, -0.5f, 0.5f), clamp(x.cpu, -0.5f, 0.5f));
  const auto bitwise_equal = [](const Tensor& gpu, const Tensor& cpu) {
    EXPECT_EQ(gpu.to(kCpu).to_vector(), cpu.to_vector());
  };
  Pair y = randn_pair({513, 77});
  y.gpu.add_(x.gpu, 0.3f);  // contiguous, float4s
  y.cpu.add_(x.cpu, 0.3f);
  bitwise_equal(y.gpu, y.cpu);
  y.gpu.add_(bias.gpu, -1.7f);  // row broadcast
  y.cpu.add_(bias.cpu, -1.7f);
  bitwise_equal(y.gpu, y.cpu);
  Pair square = randn_pair({77, 77});
  Tensor gpu_rows = y.gpu.narrow(0, 0, 77), cpu_rows = y.cpu.narrow(0, 0, 77);
  gpu_rows.add_(square.gpu.t(), 0.9f);  // strided
  cpu_rows.add_(square.cpu.t(), 0.9f);
  bitwise_equal(y.gpu, y.cpu);
  y.gpu.mul_(0.7f);
  y.cpu.mul_(0.7f);
  bitwise_equal(y.gpu, y.cpu);
}

TEST(CudaKernelsCUDA, SumOverEveryKindOfDimension) {
  TANDEM_REQUIRE_GPUS(1);
  struct Case {
    Shape shape;
    int64_t dim;
  };
  const std::vector<Case> cases = {
      {{3000, 7}, 1},      // short contiguous rows: a warp per row
      {{5, 3000}, 1},      // long contiguous rows: a block per row
      {{2, 60000, 2}, 1},  // two columns, a long reduced dim
      {{4, 50, 300}, 1},   // many columns
      {{1000, 1000}, 0},   // the bias gradient shape
      {{40000}, 0},        // everything: the two-pass reduction
      {{3, 0, 4}, 1},      // an empty reduced dim gives zeros
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(to_string(c.shape) + " over dim " + std::to_string(c.dim));
    Pair x = rand_pair(c.shape);
    expect_close(sum(x.gpu, c.dim), sum(x.cpu, c.dim), 1e-5, 1e-5);
  }
}

TEST(CudaKernelsCUDA, LargeReductionsAreAccurateAndDeterministic) {
  TANDEM_REQUIRE_GPUS(1);
  Pair x = rand_pair({3000001});
  Pair t = rand_pair({3000001});
  expect_close(sum(x.gpu), sum(x.cpu), 1e-5, 0);
  expect_close(mean(x.gpu), mean(x.cpu), 1e-5, 0);
  expect_close(mse_loss(x.gpu, t.gpu), mse_loss(x.cpu, t.cpu), 1e-5, 0);
  const float first = sum(x.gpu).item();
  for (int run = 0; run < 3; ++run) EXPECT_EQ(sum(x.gpu).item(), first);
}

// Up to 64K elements a reduction is one block's single pass; beyond, two passes (Note [Deterministic reductions]).
TEST(CudaKernelsCUDA, ReductionsOnBothSidesOfTheSinglePassLimit) {
  TANDEM_REQUIRE_GPUS(1);
  for (const int64_t n : {int64_t{1}, int64_t{4096}, int64_t{65536}, int64_t{65537}}) {
    SCOPED_TRACE(n);
    Pair x = rand_pair({n});
    Pair t = rand_pair({n});
    expect_close(sum(x.gpu), sum(x.cpu), 1e-5, 1e-6);
    expect_close(mean(x.gpu), mean(x.cpu), 1e-5, 1e-6);
    expect_close(mse_loss(x.gpu, t.gpu), mse_loss(x.cpu, t.cpu), 1e-5, 1e-6);
    expect_close(total_norm({x.gpu}, 2.0), total_norm({x.cpu}, 2.0), 1e-5, 1e-6);
    expect_close(total_norm({x.gpu}, 1.0), total_norm({x.cpu}, 1.0), 1e-5, 1e-6);
    expect_close(total_norm({x.gpu}, 3.0), total_norm({x.cpu}, 3.0), 1e-5, 1e-6);
    expect_close(total_norm({x.gpu}, INFINITY), total_norm({x.cpu}, INFINITY), 0, 0);
    const float first = mse_loss(x.gpu, t.gpu).item();
    for (int run = 0; run < 3; ++run) EXPECT_EQ(mse_loss(x.gpu, t.gpu).item(), first);
  }
}

// The seed net's products, each in one kernel of tandem's own: forward with the bias and the input gradient over a
// short k (Note [Short products]), the weight gradient with the bias gradient over the batch (Note [Tiny products]),
// written over stale gradients and then added to them, against the CPU.
TEST(CudaKernelsCUDA, SmallLinearProductsEqualTheCpu) {
  TANDEM_REQUIRE_GPUS(1);
  for (const auto& [in, out] : {std::pair<int64_t, int64_t>{10, 20}, {20, 1}, {3, 5}}) {
    SCOPED_TRACE(std::to_string(in) + " -> " + std::to_string(out));
    Pair x = randn_pair({4096, in});
    Pair w = randn_pair({out, in});
    Pair b = randn_pair({out});
    Pair r = randn_pair({4096, out});
    for (Tensor* leaf : {&x.cpu, &x.gpu, &w.cpu, &w.gpu, &b.cpu, &b.gpu}) leaf->set_requires_grad();
    for (Tensor* leaf : {&w.cpu, &w.gpu, &b.cpu, &b.gpu}) {
      leaf->set_grad(Tensor::full(leaf->shape(), 7.0f, leaf->device()));
      leaf->mark_grad_stale();
    }
    for (int pass = 0; pass < 2; ++pass) {  // over the stale gradients, then added to them
      SCOPED_TRACE(pass);
      const Tensor y_gpu = linear(x.gpu, w.gpu, b.gpu);
      const Tensor y_cpu = linear(x.cpu, w.cpu, b.cpu);
      expect_close(y_gpu, y_cpu, 1e-5, 1e-5);
      y_gpu.backward(r.gpu);
      y_cpu.backward(r.cpu);
      expect_close(x.gpu.grad(), x.cpu.grad(), 1e-5, 1e-5);
      expect_close(w.gpu.grad(), w.cpu.grad(), 1e-4, 1e-3);
      expect_close(b.gpu.grad(), b.cpu.grad(), 1e-4, 1e-3);
    }
    expect_close(matmul(r.gpu.t(), x.gpu), matmul(r.cpu.t(), x.cpu), 1e-4, 1e-3);
  }
}

// a @ b for CPU tensors, in float64, and for each element the sum of its terms' magnitudes: the scale of a float32
// sum's rounding error, against which a product with a tiny output and a long k is checked (1e-5 of it).
struct ReferenceProduct {
  std::vector<double> value;
  std::vector<double> magnitude;
};
ReferenceProduct reference_product(const Tensor& a, const Tensor& b) {
  const int64_t m = a.size(0);
  const int64_t k = a.size(1);
  const int64_t n = b.size(1);
  const std::vector<float> av = a.contiguous().to_vector();
  const std::vector<float> bv = b.contiguous().to_vector();
  ReferenceProduct product{std::vector<double>(m * n, 0.0), std::vector<double>(m * n, 0.0)};
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t p = 0; p < k; ++p) {
      const double left = av[i * k + p];
      for (int64_t j = 0; j < n; ++j) {
        const double term = left * bv[p * n + j];
        product.value[i * n + j] += term;
        product.magnitude[i * n + j] += std::abs(term);
      }
    }
  }
  return product;
}

void expect_matches(const Tensor& result, const ReferenceProduct& expected, double factor = 1.0) {
  const std::vector<float> actual = result.to(kCpu).to_vector();
  ASSERT_EQ(actual.size(), expected.value.size());
  for (size_t e = 0; e < actual.size(); ++e) {
    EXPECT_NEAR(actual[e], factor * expected.value[e], 1e-5 * factor * expected.magnitude[e]) << "element " << e;
  }
}

// a @ b on the GPU for two layouts of [m, k] x [k, n] against float64 on the CPU: a with rows longer than k (strided)
// times b as a transposed view, and a as a transposed view times b with columns narrowed out of wider rows; each
// computed twice, bitwise equal.
void expect_strided_products_match(int64_t m, int64_t n, int64_t k) {
  const Pair wide = randn_pair({m, k + 3});
  const Pair bt = randn_pair({n, k});
  const Tensor strided_gpu = matmul(wide.gpu.narrow(1, 1, k), bt.gpu.t());
  expect_matches(strided_gpu, reference_product(wide.cpu.narrow(1, 1, k), bt.cpu.t()));
  EXPECT_EQ(matmul(wide.gpu.narrow(1, 1, k), bt.gpu.t()).to(kCpu).to_vector(), strided_gpu.to(kCpu).to_vector());
  const Pair at = randn_pair({k, m});
  const Pair b = randn_pair({k, n + 5});
  const Tensor narrowed_gpu = matmul(at.gpu.t(), b.gpu.narrow(1, 2, n));
  expect_matches(narrowed_gpu, reference_product(at.cpu.t(), b.cpu.narrow(1, 2, n)));
  EXPECT_EQ(matmul(at.gpu.t(), b.gpu.narrow(1, 2, n)).to(kCpu).to_vector(), narrowed_gpu.to(kCpu).to_vector());
}

// Products with a tiny output over a long k take one kernel of their own (Note [Tiny products]): plain products of
// strided and transposed views, and a linear layer's weight gradient with and without its bias gradient (the row
// sums), written over stale gradients and then added to them, against float64 on the CPU; equal inputs give bitwise
// equal results.
TEST(CudaKernelsCUDA, TinyOutputProductsOverALongKEqualFloat64) {
  TANDEM_REQUIRE_GPUS(1);
  for (const int64_t k : {int64_t{256}, int64_t{4096}, int64_t{10000}}) {
    // Square, wide and long-row outputs, up to the 1024 elements that take the tiny path.
    for (const auto& [m, n] : {std::pair<int64_t, int64_t>{1, 1}, {10, 20}, {32, 32}, {3, 40}, {1, 1000}}) {
      SCOPED_TRACE("m = " + std::to_string(m) + ", n = " + std::to_string(n) + ", k = " + std::to_string(k));
      expect_strided_products_match(m, n, k);

      // The weight gradient g^T x of Linear(n, m) over a batch of k, with the bias gradient and without.
      for (const bool with_bias : {true, false}) {
        SCOPED_TRACE(with_bias ? "with bias" : "without bias");
        const Pair x = randn_pair({k, n});
        const Pair g = randn_pair({k, m});
        Tensor w = Tensor::randn({m, n}, kGpu);
        Tensor bias = with_bias ? Tensor::randn({m}, kGpu) : Tensor();
        for (Tensor* leaf : {&w, &bias}) {
          if (!leaf->defined()) continue;
          leaf->set_requires_grad();
          leaf->set_grad(Tensor::full(leaf->shape(), 7.0f, kGpu));
          leaf->mark_grad_stale();
        }
        const ReferenceProduct weight_grad = reference_product(g.cpu.t(), x.cpu);
        const ReferenceProduct bias_grad = reference_product(g.cpu.t(), Tensor::ones({k, 1}, kCpu));
        for (const double pass : {1.0, 2.0}) {  // over the stale gradients, then added to them
          SCOPED_TRACE(pass);
          linear(x.gpu, w, bias).backward(g.gpu);
          expect_matches(w.grad(), weight_grad, pass);
          if (with_bias) expect_matches(bias.grad().reshape({m, 1}), bias_grad, pass);
        }
      }
    }
  }
}

// x w^T + b for CPU tensors, in float64 (ReLU applied with `relu`), with each element's scale as reference_product.
ReferenceProduct reference_linear(const Tensor& x, const Tensor& w, const Tensor& b, bool relu) {
  const int64_t n = w.size(0);
  ReferenceProduct product =
      reference_product(cat({x, Tensor::ones({x.size(0), 1}, kCpu)}, 1), cat({w.t(), b.reshape({1, n})}, 0));
  if (relu)
    for (double& v : product.value) v = std::max(v, 0.0);
  return product;
}

// Products over a short k take one kernel of their own (Note [Short products]): plain products of strided and
// transposed views, a linear layer's forward with its bias, with ReLU and in BFloat16, and its input gradient written
// over a stale gradient and then added to it, against float64 on the CPU; equal inputs give bitwise equal results.
// k = 33 and an output over 2^20 elements take cuBLASLt and must agree alike.
TEST(CudaKernelsCUDA, ShortProductsEqualFloat64) {
  TANDEM_REQUIRE_GPUS(1);
  for (const int64_t k : {int64_t{1}, int64_t{10}, int64_t{32}, int64_t{33}}) {
    for (const auto& [m, n] :
         {std::pair<int64_t, int64_t>{1, 1}, {4096, 20}, {4096, 1}, {7, 300}, {1024, 1024}, {1025, 1024}}) {
      SCOPED_TRACE("m = " + std::to_string(m) + ", n = " + std::to_string(n) + ", k = " + std::to_string(k));
      expect_strided_products_match(m, n, k);

      // Linear(k, n) over a batch of m: forward with the bias, with ReLU and in BFloat16 (against the rounded inputs).
      const Pair x = randn_pair({m, k});
      const Pair bias = randn_pair({n});
      Tensor w = Tensor::randn({n, k}, kGpu);
      const Tensor w_cpu = w.to(kCpu);
      expect_matches(linear(x.gpu, w, bias.gpu), reference_linear(x.cpu, w_cpu, bias.cpu, false));
      expect_matches(linear_relu(x.gpu, w, bias.gpu), reference_linear(x.cpu, w_cpu, bias.cpu, true));
      const auto rounded = [](const Tensor& t) { return t.to(DType::BFloat16).to(DType::Float32); };
      expect_matches(linear(x.gpu, w, bias.gpu, Precision::BFloat16),
                     reference_linear(rounded(x.cpu), rounded(w_cpu), bias.cpu, false));

      // The input gradient g w of Linear(n, k) over a batch of m: k is the layer's outputs.
      Tensor input = randn_pair({m, n}).gpu.set_requires_grad();
      input.set_grad(Tensor::full(input.shape(), 7.0f, kGpu));
      input.mark_grad_stale();
      const Pair w_out = randn_pair({k, n});
      const Pair g = randn_pair({m, k});
      const ReferenceProduct input_grad = reference_product(g.cpu, w_out.cpu);
      for (const double pass : {1.0, 2.0}) {  // over the stale gradient, then added to it
        SCOPED_TRACE(pass);
        matmul(input, w_out.gpu.t()).backward(g.gpu);
        expect_matches(input.grad(), input_grad, pass);
      }
    }
  }
}

// A linear layer's backward runs its input-gradient product (short) and its weight-gradient product (tiny) in one
// kernel (Note [Paired small products]): the input, weight and bias gradients, over stale gradients and then added
// to them, against float64, in float32 and BFloat16; and each element bitwise what the two products give in kernels
// of their own (the plain form of linear, which does not pair them).
TEST(CudaKernelsCUDA, PairedInputAndWeightGradientProductsEqualFloat64) {
  TANDEM_REQUIRE_GPUS(1);
  // Linear(in, out) over a batch: out is the short product's k, the batch the tiny product's.
  for (const auto& [batch, in, out] : {std::tuple<int64_t, int64_t, int64_t>{4096, 20, 1}, {2048, 10, 20},
                                       {1000, 32, 32}, {300, 1, 7}}) {
    SCOPED_TRACE("batch = " + std::to_string(batch) + ", in = " + std::to_string(in) + ", out = " +
                 std::to_string(out));
    const Pair x = randn_pair({batch, in});
    const Pair w = randn_pair({out, in});
    const Pair b = randn_pair({out});
    const Pair g = randn_pair({batch, out});
    const auto gradients = [&](bool fused, Precision precision, bool stale) {
      FusedLinear form(fused);
      std::vector<Tensor> leaves = {x.gpu.clone().set_requires_grad(), w.gpu.clone().set_requires_grad(),
                                    b.gpu.clone().set_requires_grad()};
      for (Tensor& leaf : leaves) {
        if (!stale) continue;
        leaf.set_grad(Tensor::full(leaf.shape(), 7.0f, kGpu));
        leaf.mark_grad_stale();
      }
      for (int pass = 0; pass < 2; ++pass) linear(leaves[0], leaves[1], leaves[2], precision).backward(g.gpu);
      std::vector<std::vector<float>> values;
      for (const Tensor& leaf : leaves) values.push_back(leaf.grad().to(kCpu).to_vector());
      return values;
    };
    const auto rounded = [](const Tensor& t) { return t.to(DType::BFloat16).to(DType::Float32); };
    for (const Precision precision : {Precision::Float32, Precision::BFloat16}) {
      SCOPED_TRACE(precision == Precision::BFloat16 ? "bfloat16" : "float32");
      const bool bf16 = precision == Precision::BFloat16;
      const Tensor g_in = bf16 ? rounded(g.cpu) : g.cpu;
      const ReferenceProduct input_grad = reference_product(g_in, bf16 ? rounded(w.cpu) : w.cpu);
      const ReferenceProduct weight_grad = reference_product(g_in.t(), bf16 ? rounded(x.cpu) : x.cpu);
      const ReferenceProduct bias_grad = reference_product(g_in.t(), Tensor::ones({batch, 1}, kCpu));
      const auto paired = gradients(true, precision, true);
      const auto as_tensor = [](const std::vector<float>& v, const Shape& shape) {
        return Tensor::from_vector(v, shape, kCpu);
      };
      // Two backward passes over stale gradients: the first writes over them, the second adds to it.
      expect_matches(as_tensor(paired[0], {batch, in}), input_grad, 2.0);
      expect_matches(as_tensor(paired[1], {out, in}), weight_grad, 2.0);
      expect_matches(as_tensor(paired[2], {out, 1}), bias_grad, 2.0);
      const auto separate = gradients(false, precision, false);
      EXPECT_EQ(paired[0], separate[0]);
      EXPECT_EQ(paired[1], separate[1]);
    }
  }
}

TEST(CudaKernelsCUDA, MatmulOfTransposedViewsAndLinearWithBias) {
  TANDEM_REQUIRE_GPUS(1);
  Pair a = randn_pair({300, 200});
  Pair b = randn_pair({200, 150});
  Pair at = randn_pair({200, 300});
  Pair bt = randn_pair({150, 200});
  expect_close(matmul(a.gpu, b.gpu), matmul(a.cpu, b.cpu), 1e-4, 1e-4);
  expect_close(matmul(at.gpu.t(), bt.gpu.t()), matmul(at.cpu.t(), bt.cpu.t()), 1e-4, 1e-4);
  Pair bias = randn_pair({150});
  expect_close(linear(a.gpu, bt.gpu, bias.gpu), linear(a.cpu, bt.cpu, bias.cpu), 1e-4, 1e-4);
  expect_close(linear(a.gpu, bt.gpu, Tensor()), linear(a.cpu, bt.cpu, Tensor()), 1e-4, 1e-4);
  // A column vector and a row vector: strides of size-1 dims must not matter.
  Pair column = randn_pair({200, 1});
  expect_close(matmul(a.gpu, column.gpu), matmul(a.cpu, column.cpu), 1e-4, 1e-4);
  expect_close(matmul(column.gpu.t(), b.gpu), matmul(column.cpu.t(), b.cpu), 1e-4, 1e-4);
}

TEST(CudaKernelsCUDA, PeerCopiesAreOrderedOnBothDevicesMultiCUDA) {
  TANDEM_REQUIRE_GPUS(2);
  const Device second = Device::cuda(1);
  Pair x = randn_pair({1 << 22});
  for (int round = 0; round < 3; ++round) {
    Tensor produced = x.gpu * 2.0f;       // produced on cuda:0 right before the copy
    Tensor copied = produced.to(second);  // must wait for the product
    produced.fill_(-1.0f);                // must wait for the copy to have read the values
    expect_close(copied, x.cpu * 2.0f, 0, 0);
    expect_close(copied.to(kGpu), x.cpu * 2.0f, 0, 0);
  }
}

}  // namespace
}  // namespace tandem
