// tril, triu and masked_fill against references computed here, their gradients and their errors, on every device.
#include <cmath>
#include <limits>

#include "support/test_support.h"

namespace tandem {
namespace {

using testing::expect_values;
using testing::to_double;

class MaskOpsTest : public testing::EveryDevice {
 protected:
  Tensor values(const std::vector<float>& v, const Shape& shape) { return Tensor::from_vector(v, shape, device()); }
};

// x's values ([batch, rows, cols], row-major) with the elements outside the triangle set to 0.
std::vector<double> triangle_reference(const std::vector<double>& x, int64_t rows, int64_t cols, int64_t diagonal,
                                       bool lower) {
  std::vector<double> out(x);
  for (size_t k = 0; k < out.size(); ++k) {
    const int64_t i = static_cast<int64_t>(k) / cols % rows, j = static_cast<int64_t>(k) % cols;
    const bool kept = lower ? j - i <= diagonal : j - i >= diagonal;
    if (!kept) out[k] = 0;
  }
  return out;
}

TEST_P(MaskOpsTest, TrilAndTriuKeepTheirTriangleOfEveryMatrix) {
  manual_seed(51);
  // Batched, not square, and a transposed view: the kernels read a non-contiguous input.
  const Tensor x = Tensor::randn({2, 4, 3}, device()).transpose(1, 2);
  const std::vector<double> X = to_double(x);
  for (int64_t diagonal : {-5, -2, -1, 0, 1, 3, 4}) {
    SCOPED_TRACE(diagonal);
    expect_values(tril(x, diagonal), triangle_reference(X, 3, 4, diagonal, true), {2, 3, 4});
    expect_values(triu(x, diagonal), triangle_reference(X, 3, 4, diagonal, false), {2, 3, 4});
  }
  expect_values(tril(values({1, 2, 3, 4}, {2, 2})), {1, 0, 3, 4}, {2, 2});
  expect_values(triu(values({1, 2, 3, 4}, {2, 2})), {1, 2, 0, 4}, {2, 2});
  EXPECT_EQ(tril(Tensor::ones({2, 0, 3}, device())).shape(), (Shape{2, 0, 3}));
}

TEST_P(MaskOpsTest, TrilSelectsSoNaNOutsideTheTriangleBecomesZero) {
  expect_values(tril(values({1, std::nanf(""), 3, 4}, {2, 2})), {1, 0, 3, 4}, {2, 2});
}

TEST_P(MaskOpsTest, TriangleGradientsAreMaskedTheSameWay) {
  const Tensor x = Tensor::ones({2, 3}, device()).set_requires_grad();
  const Tensor weights = values({1, 2, 3, 4, 5, 6}, {2, 3});
  sum(tril(x, 1) * weights).backward();
  expect_values(x.grad(), {1, 2, 0, 4, 5, 6}, {2, 3});
  x.set_grad({});
  sum(triu(x, 1) * weights).backward();
  expect_values(x.grad(), {0, 2, 3, 0, 0, 6}, {2, 3});
}

TEST_P(MaskOpsTest, TriangleErrors) {
  EXPECT_ERROR(tril(values({1, 2, 3}, {3})), "tril: expected a tensor of at least 2 dims, got shape [3]");
  EXPECT_ERROR(triu(Tensor::zeros({2, 2}, DType::Int64, device())), "triu: got int64 but expected float32");
  EXPECT_ERROR(tril(Tensor()), "tril: input is an undefined tensor");
}

TEST_P(MaskOpsTest, MaskedFillFillsWhereTheMaskIsNonZero) {
  const Tensor x = values({1, 2, 3, 4, 5, 6}, {2, 3});
  // A comparison's float32 mask of the same shape.
  expect_values(masked_fill(x, gt(x, 3.5f), -1.0f), {1, 2, 3, -1, -1, -1}, {2, 3});
  // A row mask broadcast over the rows, with a value other than 1 counting as true.
  expect_values(masked_fill(x, values({0, 2, 0}, {3}), 9.0f), {1, 9, 3, 4, 9, 6}, {2, 3});
  // int64 masks, a column broadcast over the columns; -inf as the value (attention's masks).
  const Tensor column = Tensor::from_vector(std::vector<int64_t>{1, 0}, {2, 1}, device());
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(masked_fill(x, column, -inf).to_vector(), (std::vector<float>{-inf, -inf, -inf, 4, 5, 6}));
  const Tensor large = Tensor::from_vector(std::vector<int64_t>{0, int64_t{1} << 62, -1, 0, 0, 0}, {2, 3}, device());
  expect_values(masked_fill(x, large, 0.0f), {1, 0, 0, 4, 5, 6}, {2, 3});
}

TEST_P(MaskOpsTest, MaskedFillGradientIsZeroWhereFilled) {
  const Tensor x = values({1, 2, 3, 4}, {2, 2}).set_requires_grad();
  const Tensor mask = values({1, 0, 0, 1}, {2, 2});
  sum(masked_fill(x, mask, 5.0f) * x).backward();
  // d/dx of x * x where kept (2x), and of 5 * x where filled (5).
  expect_values(x.grad(), {5, 4, 6, 5}, {2, 2});
}

TEST_P(MaskOpsTest, MaskedFillErrors) {
  const Tensor x = Tensor::zeros({3, 4}, device());
  EXPECT_ERROR(masked_fill(x, Tensor::ones({3, 1, 4}, device()), 0.0f),
               "masked_fill: mask of shape [3, 1, 4] does not broadcast to the input's shape [3, 4]");
  EXPECT_ERROR(masked_fill(x, Tensor::ones({5}, device()), 0.0f),
               "masked_fill: shapes [3, 4] and [5] cannot be broadcast together");
  EXPECT_ERROR(masked_fill(x, Tensor::ones({4}, DType::BFloat16, device()), 0.0f),
               "masked_fill: mask is bfloat16 but expected float32 or int64 (0 keeps, non-zero fills)");
  EXPECT_ERROR(masked_fill(x, Tensor(), 0.0f), "masked_fill: mask is an undefined tensor");
  EXPECT_ERROR(masked_fill(Tensor::zeros({2}, DType::Int64, device()), Tensor::ones({2}, device()), 0.0f),
               "masked_fill: got int64 but expected float32");
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(MaskOpsTest);

TEST(MaskOps, MaskOnAnotherDevice) {
  EXPECT_ERROR(masked_fill(Tensor::zeros({2}), Tensor::ones({2}, Device::cpu(1)), 0.0f),
               "masked_fill: expected all tensors on one device, got cpu:0 and cpu:1");
}

}  // namespace
}  // namespace tandem
