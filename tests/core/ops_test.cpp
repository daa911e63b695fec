// Every op against a float64 host reference, on every device.
#include "support/test_support.h"

#include <cmath>

namespace tandem {
namespace {

using testing::expect_values;
using testing::matmul_reference;
using testing::to_double;

class OpsTest : public testing::EveryDevice {
 protected:
  Tensor random(const Shape& shape) { return Tensor::randn(shape, device()); }
};

// Elementwise reference with NumPy broadcasting of b ([rows, cols] against a row [cols] or column [rows, 1]).
std::vector<double> broadcast_reference(const std::vector<double>& a, const std::vector<double>& b, int64_t rows,
                                        int64_t cols, bool b_is_row, double (*op)(double, double)) {
  std::vector<double> out(static_cast<size_t>(rows * cols));
  for (int64_t i = 0; i < rows; ++i)
    for (int64_t j = 0; j < cols; ++j) out[i * cols + j] = op(a[i * cols + j], b_is_row ? b[j] : b[i]);
  return out;
}

TEST_P(OpsTest, ElementwiseWithBroadcasting) {
  manual_seed(1);
  Tensor a = random({5, 7});
  Tensor row = random({7});
  Tensor col = random({5, 1});
  const auto A = to_double(a), R = to_double(row), C = to_double(col);
  const auto add = [](double x, double y) { return x + y; };
  const auto sub = [](double x, double y) { return x - y; };
  const auto mul = [](double x, double y) { return x * y; };
  expect_values(a + row, broadcast_reference(A, R, 5, 7, true, add), {5, 7});
  expect_values(a - col, broadcast_reference(A, C, 5, 7, false, sub), {5, 7});
  expect_values(a * row, broadcast_reference(A, R, 5, 7, true, mul), {5, 7});
  expect_values(row + a, broadcast_reference(A, R, 5, 7, true, add), {5, 7});
  // [5, 1] with [7] broadcasts to [5, 7].
  std::vector<double> outer(35);
  for (int i = 0; i < 5; ++i)
    for (int j = 0; j < 7; ++j) outer[i * 7 + j] = C[i] * R[j];
  expect_values(col * row, outer, {5, 7});
  // Non-contiguous operands.
  Tensor at = a.t();
  std::vector<double> twice(35);
  for (int i = 0; i < 7; ++i)
    for (int j = 0; j < 5; ++j) twice[i * 5 + j] = 2 * A[j * 7 + i];
  expect_values(at + at, twice, {7, 5});
}

TEST_P(OpsTest, ScalarOps) {
  Tensor a = Tensor::from_vector({1, -2, 3}, {3}, device());
  expect_values(a * 2.0f, {2, -4, 6}, {3});
  expect_values(0.5f * a, {0.5, -1, 1.5}, {3});
  expect_values(a / 4.0f, {0.25, -0.5, 0.75}, {3});
  expect_values(-a, {-1, 2, -3}, {3});
}

TEST_P(OpsTest, ElementwiseErrors) {
  EXPECT_ERROR(random({2, 3}) + random({4}), "add: shapes [2, 3] and [4] cannot be broadcast together");
  EXPECT_ERROR(random({2}) * Tensor::ones({2}, Device::cpu(3)), "expected all tensors on one device");
  EXPECT_ERROR(Tensor() + random({2}), "undefined");
}

TEST_P(OpsTest, MatmulMatchesFloat64) {
  manual_seed(2);
  for (const auto& [m, k, n] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{{3, 4, 5}, {1, 7, 1}, {33, 17, 9}}) {
    Tensor a = random({m, k});
    Tensor b = random({k, n});
    expect_values(matmul(a, b), matmul_reference(to_double(a), to_double(b), m, k, n), {m, n}, 1e-5, 1e-5);
    // Transposed views go to BLAS without copies; the result must be the same.
    Tensor at = random({k, m});
    expect_values(matmul(at.t(), b), matmul_reference(to_double(at.t()), to_double(b), m, k, n), {m, n}, 1e-5,
                  1e-5);
  }
  // Empty inner dimension: a sum over nothing.
  expect_values(matmul(Tensor::zeros({2, 0}, device()), Tensor::zeros({0, 3}, device())), std::vector<double>(6, 0),
                {2, 3});
  EXPECT_ERROR(matmul(random({2, 3}), random({2, 3})), "shapes [2, 3] and [2, 3] cannot be multiplied");
  // A vector is a one-row matrix on the left (nd_tensor_test.cpp has torch.matmul's other cases).
  const Tensor v = random({3});
  const Tensor column = random({3, 1});
  expect_values(matmul(v, column), matmul_reference(to_double(v), to_double(column), 1, 3, 1), {1}, 1e-5, 1e-5);
}

TEST_P(OpsTest, LinearMatchesFloat64) {
  manual_seed(3);
  Tensor x = random({6, 4});
  Tensor w = random({3, 4});
  Tensor b = random({3});
  std::vector<double> expected = matmul_reference(to_double(x), to_double(w.t()), 6, 4, 3);
  const auto B = to_double(b);
  for (int i = 0; i < 6; ++i)
    for (int j = 0; j < 3; ++j) expected[i * 3 + j] += B[j];
  expect_values(linear(x, w, b), expected, {6, 3}, 1e-5, 1e-5);
  expect_values(linear(x, w, Tensor()) + b, expected, {6, 3}, 1e-5, 1e-5);
  EXPECT_ERROR(linear(random({6, 5}), w, b), "linear: input has shape [6, 5] but weight has shape [3, 4]");
  EXPECT_ERROR(linear(x, w, random({4})), "linear: bias has shape [4] but expected [3]");
}

TEST_P(OpsTest, Activations) {
  Tensor x = Tensor::from_vector({-2, -0.5, 0, 0.5, 2}, {5}, device());
  expect_values(relu(x), {0, 0, 0, 0.5, 2}, {5});
  std::vector<double> expected;
  for (double v : {-2.0, -0.5, 0.0, 0.5, 2.0}) expected.push_back(std::tanh(v));
  expect_values(tanh(x), expected, {5}, 1e-6, 1e-6);
}

TEST_P(OpsTest, Reductions) {
  manual_seed(4);
  Tensor x = random({3, 4, 5});
  const auto X = to_double(x);
  double total = 0;
  for (double v : X) total += v;
  expect_values(sum(x), {total}, {}, 1e-5, 1e-5);
  expect_values(mean(x), {total / 60}, {}, 1e-5, 1e-6);
  for (int64_t dim = 0; dim < 3; ++dim) {
    const int64_t sizes[3] = {3, 4, 5};
    Shape reduced;
    for (int64_t d = 0; d < 3; ++d)
      if (d != dim) reduced.push_back(sizes[d]);
    std::vector<double> expected(static_cast<size_t>(numel_of(reduced)), 0.0);
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 4; ++j)
        for (int64_t k = 0; k < 5; ++k) {
          const int64_t idx[3] = {i, j, k};
          int64_t flat = 0;
          for (int64_t d = 0; d < 3; ++d)
            if (d != dim) flat = flat * sizes[d] + idx[d];
          expected[flat] += X[(i * 4 + j) * 5 + k];
        }
    expect_values(sum(x, dim), expected, reduced, 1e-5, 1e-5);
    Shape kept = {3, 4, 5};
    kept[dim] = 1;
    expect_values(sum(x, dim - 3, true), expected, kept, 1e-5, 1e-5);
  }
  expect_values(sum(Tensor::zeros({0, 3}, device())), {0}, {});
  expect_values(sum(Tensor::zeros({0, 3}, device()), 0), {0, 0, 0}, {3});
  EXPECT_TRUE(std::isnan(mean(Tensor::zeros({0}, device())).item()));
  EXPECT_ERROR(sum(x, 3), "out of range");
}

TEST_P(OpsTest, LargeReductionIsAccurate) {
  // 2^20 + 3 elements of 0.1: float32 accumulation in one pass would drift; the backends must not.
  Tensor x = Tensor::full({(1 << 20) + 3}, 0.1f, device());
  expect_values(sum(x), {((1 << 20) + 3) * static_cast<double>(0.1f)}, {}, 1e-6, 0);
  Tensor y = Tensor::full({4099, 1}, 0.25f, device());
  expect_values(sum(y, 0), {4099 * 0.25}, {1}, 1e-6, 0);
}

TEST_P(OpsTest, Cat) {
  Tensor a = Tensor::from_vector({1, 2, 3, 4}, {2, 2}, device());
  Tensor b = Tensor::from_vector({5, 6}, {1, 2}, device());
  expect_values(cat({a, b}), {1, 2, 3, 4, 5, 6}, {3, 2});
  expect_values(cat({a, a.t()}, 1), {1, 2, 1, 3, 3, 4, 2, 4}, {2, 4});
  expect_values(cat({a, Tensor::zeros({0, 2}, device())}), {1, 2, 3, 4}, {2, 2});
  EXPECT_ERROR(cat({}), "non-empty list");
  EXPECT_ERROR(cat({a, b}, 1), "cat: tensor 1 has shape [1, 2] but expected size 2 at dimension 0");
  EXPECT_ERROR(cat({a, Tensor::ones({2}, device())}), "dimensions");
}

TEST_P(OpsTest, MseLoss) {
  Tensor input = Tensor::from_vector({1, 2, 3, 4}, {4, 1}, device());
  Tensor target = Tensor::from_vector({0, 2, 5, 1}, {4, 1}, device());
  expect_values(mse_loss(input, target), {(1 + 0 + 4 + 9) / 4.0}, {});
  EXPECT_ERROR(mse_loss(input, target.view({4})), "mse_loss: input has shape [4, 1] but target has shape [4]");
}

TEST_P(OpsTest, AllcloseAcrossDevices) {
  Tensor a = Tensor::from_vector({1, 2, 3}, {3}, device());
  EXPECT_TRUE(allclose(a, a.to(Device::cpu(1))));
  EXPECT_FALSE(allclose(a, a * 1.001f));
  EXPECT_TRUE(allclose(a, a * 1.001f, 1e-2));
  EXPECT_FALSE(allclose(a, a.view({3, 1})));
  EXPECT_NEAR(max_abs_diff(a, a * 2.0f), 3.0, 1e-6);
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(OpsTest);

}  // namespace
}  // namespace tandem
