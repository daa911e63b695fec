// Values of the compute kernels behind the public ops (GEMM with transposed and broadcast operands, strided
// elementwise work, reductions, fused loss and optimizer updates) against float64 host references, on every device.

#include <cmath>
#include <cstdint>
#include <vector>

#include "support/test_support.h"

namespace tandem {
namespace {

using testing::expect_values;
using testing::matmul_reference;
using testing::to_double;

class BackendKernels : public testing::EveryDevice {};

// Row-major values of a 2-D tensor's transpose, on the host.
std::vector<double> transposed(const std::vector<double>& values, int64_t rows, int64_t cols) {
  std::vector<double> out(values.size());
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[c * rows + r] = values[r * cols + c];
  return out;
}

TEST_P(BackendKernels, MatmulOfRowMajorAndTransposedViews) {
  const int64_t m = 5, k = 7, n = 3;
  Tensor a = Tensor::randn({m, k}, device());
  Tensor b = Tensor::randn({k, n}, device());
  Tensor a_stored_transposed = Tensor::randn({k, m}, device());
  Tensor b_stored_transposed = Tensor::randn({n, k}, device());
  std::vector<double> ra = to_double(a), rb = to_double(b);
  std::vector<double> rat = transposed(to_double(a_stored_transposed), k, m);
  std::vector<double> rbt = transposed(to_double(b_stored_transposed), n, k);

  expect_values(matmul(a, b), matmul_reference(ra, rb, m, k, n), {m, n});
  expect_values(matmul(a_stored_transposed.t(), b), matmul_reference(rat, rb, m, k, n), {m, n});
  expect_values(matmul(a, b_stored_transposed.t()), matmul_reference(ra, rbt, m, k, n), {m, n});
  expect_values(matmul(a_stored_transposed.t(), b_stored_transposed.t()), matmul_reference(rat, rbt, m, k, n),
                {m, n});
}

TEST_P(BackendKernels, LinearAddsBiasToEveryRow) {
  const int64_t batch = 4, in = 6, out = 3;
  Tensor x = Tensor::randn({batch, in}, device());
  Tensor weight = Tensor::randn({out, in}, device());
  Tensor bias = Tensor::from_vector({0.5f, -1.0f, 2.0f}, {out}, device());
  std::vector<double> expected =
      matmul_reference(to_double(x), transposed(to_double(weight), out, in), batch, in, out);
  for (int64_t i = 0; i < batch; ++i)
    for (int64_t j = 0; j < out; ++j) expected[i * out + j] += to_double(bias)[j];
  expect_values(linear(x, weight, bias), expected, {batch, out});
}

TEST_P(BackendKernels, MatmulOfBroadcastOperands) {
  // [1, 3] expanded to [2, 3]: every row of the left operand is the same (row stride 0).
  Tensor row = Tensor::from_vector({1, 2, 3}, {1, 3}, device()).expand({2, 3});
  // [3, 1] expanded to [3, 2]: every column of the right operand is the same (column stride 0).
  Tensor column = Tensor::from_vector({4, 5, 6}, {3, 1}, device()).expand({3, 2});
  expect_values(matmul(row, column), {32, 32, 32, 32}, {2, 2});

  // A column of a wider matrix, expanded: neither stride is 1.
  Tensor wide = Tensor::from_vector({1, 10, 2, 20, 3, 30}, {3, 2}, device());
  Tensor repeated = wide.narrow(1, 1, 1).expand({3, 2});  // [[10, 10], [20, 20], [30, 30]]
  Tensor left = Tensor::from_vector({1, 0, -1, 2, 1, 0}, {2, 3}, device());
  expect_values(matmul(left, repeated), {-20, -20, 40, 40}, {2, 2});
}

TEST_P(BackendKernels, MatmulWithEmptyDimensions) {
  expect_values(matmul(Tensor::ones({2, 0}, device()), Tensor::ones({0, 3}, device())), {0, 0, 0, 0, 0, 0}, {2, 3});
  expect_values(matmul(Tensor::ones({0, 4}, device()), Tensor::ones({4, 3}, device())), {}, {0, 3});
  expect_values(linear(Tensor::ones({2, 0}, device()), Tensor::ones({3, 0}, device()),
                       Tensor::from_vector({1, 2, 3}, {3}, device())),
                {1, 2, 3, 1, 2, 3}, {2, 3});
}

TEST_P(BackendKernels, BinaryOpsBroadcastStrideZeroInputs) {
  Tensor a = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, device());
  Tensor row = Tensor::from_vector({10, 20, 30}, {3}, device());
  Tensor column = Tensor::from_vector({2, -1}, {2, 1}, device());
  expect_values(a + row, {11, 22, 33, 14, 25, 36}, {2, 3});
  expect_values(a - column, {-1, 0, 1, 5, 6, 7}, {2, 3});
  expect_values(column * row, {20, 40, 60, -10, -20, -30}, {2, 3});
  // a non-contiguous (transposed) input
  expect_values(a.t() * Tensor::from_vector({1, -1}, {2}, device()), {1, -4, 2, -5, 3, -6}, {3, 2});
}

TEST_P(BackendKernels, BinaryOpsBroadcastInThreeDimensions) {
  const Shape shape{2, 3, 4};
  Tensor a = Tensor::randn(shape, device());
  Tensor b = Tensor::randn({3, 1}, device());
  std::vector<double> ra = to_double(a), rb = to_double(b), expected(ra.size());
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t l = 0; l < 4; ++l) expected[(i * 3 + j) * 4 + l] = ra[(i * 3 + j) * 4 + l] - rb[j];
  expect_values(a - b, expected, shape);
}

TEST_P(BackendKernels, InPlaceAccumulateAndScale) {
  Tensor y = Tensor::from_vector({1, 2, 3}, {3}, device());
  y.add_(Tensor::from_vector({1, 1, 2}, {3}, device()), -2.0f);
  expect_values(y, {-1, 0, -1}, {3});
  y.mul_(3.0f);
  expect_values(y, {-3, 0, -3}, {3});
  Tensor x = Tensor::from_vector({2, -4}, {2}, device());
  expect_values(x * 1.5f, {3, -6}, {2});
  expect_values(x / 4.0f, {0.5, -1}, {2});
  expect_values(-x, {-2, 4}, {2});
}

TEST_P(BackendKernels, InPlaceAccumulateOfBroadcastAndStridedSources) {
  Tensor y = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, device());
  y.add_(Tensor::from_vector({1, 0, -1}, {3}, device()), 0.5f);  // one row, broadcast over y's rows
  expect_values(y, {1.5, 2, 2.5, 4.5, 5, 5.5}, {2, 3});
  y.add_(Tensor::from_vector({1, 2, 3, 4, 5, 6}, {3, 2}, device()).t());  // a transposed view
  expect_values(y, {2.5, 5, 7.5, 6.5, 9, 11.5}, {2, 3});
}

// Note [Rounding like the CPU]: y + alpha * x rounds the product before the sum on every device. Here the product's
// rounding error is all that is left: rounded twice the result is 0, fused it would be 2^-46. Nine elements: on a GPU
// two float4s and a tail.
TEST_P(BackendKernels, InPlaceAccumulateRoundsTheProductFirst) {
  const float one_ulp_up = std::nextafter(1.0f, 2.0f);                        // 1 + 2^-23
  Tensor y = Tensor::full({9}, -std::nextafter(one_ulp_up, 2.0f), device());  // -(1 + 2^-22)
  y.add_(Tensor::full({9}, one_ulp_up, device()), one_ulp_up);
  for (float v : y.to_vector()) EXPECT_EQ(v, 0.0f);
}

// tanh's gradient g (1 - y^2) rounds each operation on every device, as the CPU does.
TEST_P(BackendKernels, TanhGradientRoundsEachOperation) {
  Tensor x = Tensor::randn({1001}, device()).set_requires_grad();
  Tensor w = Tensor::randn({1001}, device());
  const Tensor y = tanh(x);
  sum(y * w).backward();
  const std::vector<float> ys = y.to_vector(), ws = w.to_vector(), grads = x.grad().to_vector();
  for (size_t i = 0; i < ys.size(); ++i) {
    const float square = ys[i] * ys[i];
    const float complement = 1.0f - square;
    EXPECT_EQ(grads[i], ws[i] * complement) << "at " << i;
  }
}

TEST_P(BackendKernels, FillAndCopyThroughStridedViews) {
  Tensor x = Tensor::zeros({3, 4}, device());
  x.narrow(1, 1, 1).fill_(5.0f);
  expect_values(x, {0, 5, 0, 0, 0, 5, 0, 0, 0, 5, 0, 0}, {3, 4});

  x.narrow(1, 2, 2).copy_(Tensor::from_vector({7, 8}, {2}, device()));  // broadcast source into a strided view
  expect_values(x, {0, 5, 7, 8, 0, 5, 7, 8, 0, 5, 7, 8}, {3, 4});

  Tensor m = Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, device());
  Tensor mt = m.t().contiguous();
  EXPECT_TRUE(mt.is_contiguous());
  expect_values(mt, {1, 4, 2, 5, 3, 6}, {3, 2});
  expect_values(Tensor::full({2, 2}, -1.5f, device()), {-1.5, -1.5, -1.5, -1.5}, {2, 2});
}

TEST_P(BackendKernels, SumOverEachDimensionOfThreeDimensionalTensor) {
  const Shape shape{2, 3, 4};
  Tensor x = Tensor::randn(shape, device());
  std::vector<double> rx = to_double(x);
  auto at = [&](int64_t i, int64_t j, int64_t l) { return rx[(i * 3 + j) * 4 + l]; };

  std::vector<double> over0(12, 0.0), over1(8, 0.0), over2(6, 0.0);
  double total = 0.0;
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t l = 0; l < 4; ++l) {
        over0[j * 4 + l] += at(i, j, l);
        over1[i * 4 + l] += at(i, j, l);
        over2[i * 3 + j] += at(i, j, l);
        total += at(i, j, l);
      }
  expect_values(sum(x, 0), over0, {3, 4});
  expect_values(sum(x, 1), over1, {2, 4});
  expect_values(sum(x, 2), over2, {2, 3});
  expect_values(sum(x, -1, /*keepdim=*/true), over2, {2, 3, 1});
  expect_values(sum(x), {total}, {});
  expect_values(mean(x), {total / 24}, {});
  expect_values(sum(Tensor::ones({2, 0, 3}, device()), 1), {0, 0, 0, 0, 0, 0}, {2, 3});
}

TEST_P(BackendKernels, SumAndMeanBackwardBroadcastTheUpstreamScalar) {
  Tensor x = Tensor::randn({2, 3}, device()).set_requires_grad();
  (sum(x) * 3.0f).backward();
  expect_values(x.grad(), std::vector<double>(6, 3.0), {2, 3});
  x.set_grad(Tensor());
  mean(x).backward();
  expect_values(x.grad(), std::vector<double>(6, 1.0 / 6), {2, 3});
}

TEST_P(BackendKernels, ActivationsAndTheirGradients) {
  Tensor x = Tensor::from_vector({-2, -0.5, 0.25, 3}, {4}, device()).set_requires_grad();
  expect_values(relu(x), {0, 0, 0.25, 3}, {4});
  sum(relu(x)).backward();
  expect_values(x.grad(), {0, 0, 1, 1}, {4});

  x.set_grad(Tensor());
  std::vector<double> expected_y, expected_grad;
  for (double v : {-2.0, -0.5, 0.25, 3.0}) {
    expected_y.push_back(std::tanh(v));
    expected_grad.push_back(1 - std::tanh(v) * std::tanh(v));
  }
  expect_values(tanh(x), expected_y, {4});
  sum(tanh(x)).backward();
  expect_values(x.grad(), expected_grad, {4});
}

TEST_P(BackendKernels, MseLossForwardAndBackwardInClosedForm) {
  Tensor input = Tensor::randn({3, 4}, device()).set_requires_grad();
  Tensor target = Tensor::randn({3, 4}, device());
  std::vector<double> ri = to_double(input), rt = to_double(target);
  double squared = 0.0;
  for (size_t i = 0; i < ri.size(); ++i) squared += (ri[i] - rt[i]) * (ri[i] - rt[i]);

  Tensor loss = mse_loss(input, target);
  expect_values(loss, {squared / 12}, {});
  (loss * 0.5f).backward();
  std::vector<double> expected(ri.size());
  for (size_t i = 0; i < ri.size(); ++i) expected[i] = 0.5 * 2.0 / 12 * (ri[i] - rt[i]);
  expect_values(input.grad(), expected, {3, 4});
}

// Three steps of torch.optim.SGD's rule on a host copy in float64.
std::vector<double> sgd_reference(std::vector<double> param, const std::vector<std::vector<double>>& grads,
                                  const SgdUpdate& rule) {
  std::vector<double> buf(param.size());
  for (size_t step = 0; step < grads.size(); ++step) {
    for (size_t i = 0; i < param.size(); ++i) {
      double d = grads[step][i] + rule.weight_decay * param[i];
      if (rule.momentum != 0.0f) {
        buf[i] = step == 0 ? d : rule.momentum * buf[i] + (1.0 - rule.dampening) * d;
        d = rule.nesterov ? d + rule.momentum * buf[i] : buf[i];
      }
      param[i] -= rule.lr * d;
    }
  }
  return param;
}

void run_sgd(const Tensor& param, const Tensor& buffer, const std::vector<std::vector<double>>& grads,
             SgdUpdate rule) {
  for (size_t step = 0; step < grads.size(); ++step) {
    std::vector<float> g(grads[step].begin(), grads[step].end());
    rule.first_step = step == 0;
    sgd_update(param, Tensor::from_vector(g, param.shape(), param.device()), buffer, rule);
  }
}

TEST_P(BackendKernels, SgdMomentumMatchesHandComputedSequence) {
  // lr 0.1, momentum 0.9, gradient 1 every step: buf = 1, 1.9, 2.71 and param = 1 - 0.1 * (1 + 1.9 + 2.71).
  Tensor param = Tensor::ones({2}, device());
  Tensor buffer = Tensor::zeros({2}, device());
  SgdUpdate rule;
  rule.lr = 0.1f;
  rule.momentum = 0.9f;
  run_sgd(param, buffer, {{1, 1}, {1, 1}, {1, 1}}, rule);
  expect_values(buffer, {2.71, 2.71}, {2});
  expect_values(param, {0.439, 0.439}, {2});
}

TEST_P(BackendKernels, SgdVariantsMatchTheReferenceRule) {
  const std::vector<double> start{1.0, -2.0, 0.5};
  const std::vector<std::vector<double>> grads{{0.3, -0.1, 2.0}, {-1.0, 0.4, 0.5}, {0.2, 0.2, -0.7}};
  SgdUpdate plain;
  plain.lr = 0.05f;
  SgdUpdate damped = plain;
  damped.momentum = 0.8f;
  damped.dampening = 0.3f;
  damped.weight_decay = 0.01f;
  SgdUpdate nesterov = plain;
  nesterov.momentum = 0.9f;
  nesterov.nesterov = true;
  nesterov.weight_decay = 0.1f;
  for (const SgdUpdate& rule : {plain, damped, nesterov}) {
    Tensor param = Tensor::from_vector({1.0f, -2.0f, 0.5f}, {3}, device());
    Tensor buffer = rule.momentum != 0.0f ? Tensor::zeros({3}, device()) : Tensor();
    run_sgd(param, buffer, grads, rule);
    expect_values(param, sgd_reference(start, grads, rule), {3});
  }
}

// contiguous() of transposed views (Note [Transposing copies] in elementwise.cu on a GPU): sizes that leave partial
// tiles, a single row or column, a column stride beyond the row count (a narrowed source), and more tiles than one
// grid of blocks covers at once.
TEST_P(BackendKernels, ContiguousCopiesOfTransposesEqualTheIndexedElements) {
  struct Source {
    int64_t rows, cols, padding;  // the source is [rows, cols + padding] row-major, narrowed to `cols` columns
  };
  for (const Source source : {Source{33, 65, 0}, Source{64, 32, 0}, Source{1, 70, 0}, Source{70, 1, 0},
                              Source{37, 41, 7}, Source{2080, 2080, 0}}) {
    const int64_t stride = source.cols + source.padding;
    std::vector<float> values(static_cast<size_t>(source.rows * stride));
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 65521) - 0.5f;
    const Tensor full = Tensor::from_vector(values, {source.rows, stride}, device());
    const Tensor transposed = full.narrow(1, 0, source.cols).t();  // [cols, rows], strides [1, stride]
    const Tensor copy = transposed.contiguous();
    ASSERT_EQ(to_string(copy.shape()), to_string(Shape{source.cols, source.rows}));
    const std::vector<float> copied = copy.to_vector();
    for (int64_t r = 0; r < source.cols; ++r) {
      for (int64_t c = 0; c < source.rows; ++c) {
        ASSERT_EQ(copied[static_cast<size_t>(r * source.rows + c)], values[static_cast<size_t>(c * stride + r)])
            << "element (" << r << ", " << c << ") of the transpose of a [" << source.rows << ", " << source.cols
            << "] matrix with row stride " << stride;
      }
    }
  }
}

TEST_P(BackendKernels, HostRoundTripKeepsValues) {
  std::vector<float> values{1.5f, -2.25f, 3.0f, 0.0f, 7.0f, -8.5f};
  Tensor x = Tensor::from_vector(values, {2, 3}, device());
  EXPECT_EQ(x.to_vector(), values);
  EXPECT_FLOAT_EQ(Tensor::scalar(4.5f, device()).item(), 4.5f);
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(BackendKernels);

TEST(CpuAllocator, AlignsAndCountsWholeCacheLines) {
  const MemoryStats before = memory_stats(Device::cpu());
  {
    Tensor ten = Tensor::empty({10});        // 40 bytes, one 64-byte line
    Tensor seventeen = Tensor::empty({17});  // 68 bytes, two lines
    EXPECT_EQ(reinterpret_cast<uintptr_t>(ten.data_ptr()) % 64, 0u);
    EXPECT_EQ(reinterpret_cast<uintptr_t>(seventeen.data_ptr()) % 64, 0u);
    const MemoryStats during = memory_stats(Device::cpu());
    EXPECT_EQ(during.allocated_bytes - before.allocated_bytes, 64u + 128u);
    EXPECT_EQ(during.reserved_bytes, during.allocated_bytes);
    EXPECT_EQ(during.device_allocations - before.device_allocations, 2u);
  }
  EXPECT_EQ(memory_stats(Device::cpu()).allocated_bytes, before.allocated_bytes);
}

TEST(CpuAllocator, PeakIsTheMostAllocatedSinceTheLastReset) {
  reset_peak_memory_stats(Device::cpu());
  const MemoryStats start = memory_stats(Device::cpu());
  EXPECT_EQ(start.peak_allocated_bytes, start.allocated_bytes);
  { const Tensor big = Tensor::empty({1 << 18}); }  // 1 MiB, freed again
  const Tensor small = Tensor::empty({16});         // one 64-byte line
  const MemoryStats after = memory_stats(Device::cpu());
  EXPECT_EQ(after.allocated_bytes, start.allocated_bytes + 64);
  EXPECT_EQ(after.peak_allocated_bytes, start.allocated_bytes + (size_t{1} << 20));
  reset_peak_memory_stats(Device::cpu());
  EXPECT_EQ(memory_stats(Device::cpu()).peak_allocated_bytes, after.allocated_bytes);
}

}  // namespace
}  // namespace tandem
