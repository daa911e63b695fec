// Reductions over dimensions, softmax and the indexing ops against float64 references computed here, on every
// device.
#include <cmath>
#include <limits>

#include "support/test_support.h"

namespace tandem {
namespace {

using testing::expect_int64_values;
using testing::expect_values;
using testing::to_double;

class ReductionOpsTest : public testing::EveryDevice {
 protected:
  Tensor values(const std::vector<float>& v, const Shape& shape) { return Tensor::from_vector(v, shape, device()); }
  Tensor indices(const std::vector<int64_t>& v, const Shape& shape) { return Tensor::from_vector(v, shape, device()); }
};

// Reduces X ([2, 3, 4], row-major) over the dims flagged in `reduced` with `combine` applied to the list of values
// of each result (row-major over the kept dims).
std::vector<double> reduce_reference(const std::vector<double>& X, std::array<bool, 3> reduced,
                                     const std::function<double(const std::vector<double>&)>& combine) {
  const int64_t sizes[3] = {2, 3, 4};
  std::vector<double> out;
  for (int64_t i = 0; i < (reduced[0] ? 1 : 2); ++i)
    for (int64_t j = 0; j < (reduced[1] ? 1 : 3); ++j)
      for (int64_t k = 0; k < (reduced[2] ? 1 : 4); ++k) {
        std::vector<double> group;
        for (int64_t a = 0; a < sizes[0]; ++a)
          for (int64_t b = 0; b < sizes[1]; ++b)
            for (int64_t c = 0; c < sizes[2]; ++c)
              if ((reduced[0] || a == i) && (reduced[1] || b == j) && (reduced[2] || c == k))
                group.push_back(X[(a * 3 + b) * 4 + c]);
        out.push_back(combine(group));
      }
  return out;
}

double total(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x;
  return s;
}
double variance(const std::vector<double>& v, double correction) {
  const double m = total(v) / static_cast<double>(v.size());
  double s = 0;
  for (double x : v) s += (x - m) * (x - m);
  return s / (static_cast<double>(v.size()) - correction);
}
double log_sum_exp(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += std::exp(x);
  return std::log(s);
}

TEST_P(ReductionOpsTest, OverListsOfDims) {
  manual_seed(31);
  const Tensor x = Tensor::randn({2, 3, 4}, device());
  const auto X = to_double(x);
  const auto mean_of = [](const std::vector<double>& v) { return total(v) / static_cast<double>(v.size()); };
  // Adjacent dims, non-adjacent dims (a copy with them moved last), negative dims, keepdim.
  expect_values(sum(x, {1, 2}), reduce_reference(X, {false, true, true}, total), {2}, 1e-5, 1e-5);
  expect_values(sum(x, {0, 2}, true), reduce_reference(X, {true, false, true}, total), {1, 3, 1}, 1e-5, 1e-5);
  expect_values(sum(x, {-1, 0}), reduce_reference(X, {true, false, true}, total), {3}, 1e-5, 1e-5);
  expect_values(sum(x, 1), reduce_reference(X, {false, true, false}, total), {2, 4}, 1e-5, 1e-5);
  expect_values(mean(x, {0, 2}), reduce_reference(X, {true, false, true}, mean_of), {3}, 1e-5, 1e-6);
  expect_values(mean(x, {}, true), {mean_of(X)}, {1, 1, 1}, 1e-5, 1e-6);
  expect_values(var(x, {1}), reduce_reference(X, {false, true, false}, [](auto& v) { return variance(v, 1); }),
                {2, 4}, 1e-5, 1e-6);
  expect_values(var(x, {0, 2}, false, true),
                reduce_reference(X, {true, false, true}, [](auto& v) { return variance(v, 0); }), {1, 3, 1}, 1e-5,
                1e-6);
  expect_values(var(x, {2}, 2.5), reduce_reference(X, {false, false, true}, [](auto& v) { return variance(v, 2.5); }),
                {2, 3}, 1e-5, 1e-6);
  expect_values(var(x), {variance(X, 1)}, {}, 1e-5, 1e-6);
  expect_values(logsumexp(x, {0, 2}), reduce_reference(X, {true, false, true}, log_sum_exp), {3}, 1e-5, 1e-6);
  EXPECT_ERROR(sum(x, {1, -2}), "sum: dimension 1 appears more than once in [1, -2]");
  EXPECT_ERROR(mean(x, {3}), "mean: dimension 3 is out of range [-3, 2]");
}

TEST_P(ReductionOpsTest, EmptyAndDegenerate) {
  const Tensor empty = Tensor::zeros({2, 0}, device());
  expect_values(sum(empty, {1}), {0, 0}, {2});
  EXPECT_TRUE(std::isnan(mean(empty, {1}).to_vector()[0]));
  EXPECT_EQ(logsumexp(empty, {1}).to_vector()[0], -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(var(values({3}, {1}), {0}).item()));  // one element, unbiased: 0 / 0
  EXPECT_ERROR(max(empty, 1), "max: cannot reduce over dimension 1 of size 0 (shape [2, 0])");
  EXPECT_ERROR(argmin(empty), "argmin: cannot reduce a tensor of no elements (shape [2, 0])");
  // Infinite maxima: logsumexp is that infinity.
  const float inf = std::numeric_limits<float>::infinity();
  EXPECT_EQ(logsumexp(values({-inf, -inf, inf, 1}, {2, 2}), {1}).to_vector(), (std::vector<float>{-inf, inf}));
}

TEST_P(ReductionOpsTest, MaxMinAndTheirIndices) {
  // Ties go to the first index; NaN wins, as in torch.max / torch.min.
  const Tensor x = values({1, 5, 5, 2, -3, 0, -3, 7, 4, std::nanf(""), 9, 1}, {3, 4});
  auto [values_1, indices_1] = max(x, 1);
  const std::vector<float> v = values_1.to_vector();
  EXPECT_EQ(v[0], 5.0f);
  EXPECT_EQ(v[1], 7.0f);
  EXPECT_TRUE(std::isnan(v[2]));
  expect_int64_values(indices_1, {1, 3, 1}, {3});
  auto [min_values, min_indices] = min(x, 0, true);
  expect_values(min_values.narrow(1, 0, 1), {-3}, {1, 1});
  expect_int64_values(min_indices, {1, 2, 1, 2}, {1, 4});
  expect_int64_values(argmax(x, 1), {1, 3, 1}, {3});
  expect_int64_values(argmin(x, -1, true), {0, 0, 1}, {3, 1});
  expect_int64_values(argmax(x), {9}, {});
  const Tensor finite = values({3, -1, 8, 8, 0, 2}, {2, 3});
  expect_values(max(finite), {8}, {});
  expect_values(min(finite), {-1}, {});
  expect_int64_values(argmin(finite), {1}, {});
  // Columns (reduced dim not innermost) take another kernel.
  const Tensor wide = Tensor::randn({5, 37, 3}, device());
  const auto W = to_double(wide);
  std::vector<double> best(15, -INFINITY);
  std::vector<int64_t> where(15, 0);
  for (int64_t o = 0; o < 5; ++o)
    for (int64_t r = 0; r < 37; ++r)
      for (int64_t c = 0; c < 3; ++c)
        if (W[(o * 37 + r) * 3 + c] > best[o * 3 + c]) {
          best[o * 3 + c] = W[(o * 37 + r) * 3 + c];
          where[o * 3 + c] = r;
        }
  auto [wide_values, wide_indices] = max(wide, 1);
  expect_values(wide_values, best, {5, 3});
  expect_int64_values(wide_indices, where, {5, 3});
  // Innermost reduced dims take the row kernel: wide rows and the first of tied maxima.
  const Tensor rows = Tensor::randn({3, 100}, device());
  const auto R = to_double(rows);
  std::vector<int64_t> row_argmax(3, 0);
  for (int64_t o = 0; o < 3; ++o)
    for (int64_t r = 1; r < 100; ++r)
      if (R[o * 100 + r] > R[o * 100 + row_argmax[o]]) row_argmax[o] = r;
  expect_int64_values(argmax(rows, 1), row_argmax, {3});
}

TEST_P(ReductionOpsTest, MaxGradientGoesToTheReturnedIndex) {
  const Tensor x = values({2, 7, 7, 1}, {2, 2}).set_requires_grad();
  std::get<0>(max(x, 1)).backward(values({10, 20}, {2}));
  expect_values(x.grad(), {0, 10, 20, 0}, {2, 2});
  // Over every element, ties share the gradient evenly.
  const Tensor y = values({2, 7, 7, 1}, {2, 2}).set_requires_grad();
  max(y).backward();
  expect_values(y.grad(), {0, 0.5, 0.5, 0}, {2, 2});
}

TEST_P(ReductionOpsTest, SoftmaxMatchesFloat64) {
  manual_seed(32);
  const Tensor x = Tensor::randn({3, 5}, device()) * 3.0f;
  const auto X = to_double(x);
  for (int64_t dim : {0, 1}) {
    std::vector<double> soft(15), log_soft(15);
    for (int64_t i = 0; i < 3; ++i)
      for (int64_t j = 0; j < 5; ++j) {
        double s = 0;
        for (int64_t k = 0; k < (dim == 1 ? 5 : 3); ++k) s += std::exp(dim == 1 ? X[i * 5 + k] : X[k * 5 + j]);
        soft[i * 5 + j] = std::exp(X[i * 5 + j]) / s;
        log_soft[i * 5 + j] = X[i * 5 + j] - std::log(s);
      }
    expect_values(softmax(x, dim), soft, {3, 5}, 1e-5, 1e-7);
    expect_values(log_softmax(x, dim - 2), log_soft, {3, 5}, 1e-5, 1e-6);
  }
  EXPECT_ERROR(softmax(x, 2), "softmax: dimension 2 is out of range [-2, 1]");
}

TEST_P(ReductionOpsTest, SoftmaxIsStableForLargeInputs) {
  // exp(1e4) overflows float32; the shifted form does not, and keeps the exact differences.
  const Tensor x = values({1e4f, 1e4f + 1, 1e4f + 2, -1e4f, -1e4f, -1e4f + 1}, {2, 3});
  const double e1 = std::exp(-1.0), e2 = std::exp(-2.0);
  const double s = 1 + e1 + e2;
  expect_values(softmax(x, 1), {e2 / s, e1 / s, 1 / s, 1 / (2 + std::exp(1.0)), 1 / (2 + std::exp(1.0)),
                                std::exp(1.0) / (2 + std::exp(1.0))},
                {2, 3}, 1e-5, 1e-7);
  expect_values(log_softmax(x, 1), {-2 - std::log(s), -1 - std::log(s), -std::log(s), -std::log(2 + std::exp(1.0)),
                                    -std::log(2 + std::exp(1.0)), 1 - std::log(2 + std::exp(1.0))},
                {2, 3}, 1e-5, 1e-6);
  expect_values(logsumexp(x, {1}), {1e4 + 2 + std::log(s), -1e4 + 1 + std::log(2 * e1 + 1)}, {2}, 1e-6, 0);
}

TEST_P(ReductionOpsTest, IndexSelectAndGather) {
  const Tensor x = values({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4});
  expect_values(index_select(x, 1, indices({3, 0, 3}, {3})), {3, 0, 3, 7, 4, 7, 11, 8, 11}, {3, 3});
  expect_values(index_select(x, 0, indices({2}, {1})), {8, 9, 10, 11}, {1, 4});
  expect_values(index_select(x.t(), 0, indices({1}, {})), {1, 5, 9}, {1, 3});
  // An index at an offset into its storage: the last two elements of [9, 9, 2, 0].
  expect_values(index_select(x, 0, indices({9, 9, 2, 0}, {4}).narrow(0, 2, 2)), {8, 9, 10, 11, 0, 1, 2, 3}, {2, 4});
  // torch.gather along dim 1: out[i][j] = x[i][index[i][j]], index smaller than x in the other dim.
  expect_values(gather(x, 1, indices({1, 1, 0, 3, 2, 0}, {2, 3})), {1, 1, 0, 7, 6, 4}, {2, 3});
  expect_values(gather(x, 0, indices({2, 0, 1, 2}, {1, 4})), {8, 1, 6, 11}, {1, 4});
  // A transposed index: [[1, 3], [0, 2]], the transpose of a contiguous [[1, 0], [3, 2]].
  expect_values(gather(x, 1, indices({1, 0, 3, 2}, {2, 2}).t()), {1, 3, 4, 6}, {2, 2});
}

TEST_P(ReductionOpsTest, IndicesBeyond2To24AreExact) {
  // float32 indices could not tell 2^24 + 1 from 2^24; int64 ones can.
  const int64_t big = (int64_t{1} << 24) + 1;
  const Tensor x = Tensor::zeros({big + 1}, device());
  x.narrow(0, big, 1).fill_(7.0);
  expect_values(index_select(x, 0, indices({big, big - 1, big}, {3})), {7, 0, 7}, {3});
  expect_values(gather(x, 0, indices({big}, {1})), {7}, {1});
}

TEST_P(ReductionOpsTest, IndexErrors) {
  const Tensor x = values({0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, {3, 4});
  EXPECT_ERROR(gather(x, 1, values({1}, {1, 1})),
               "gather: index is float32 but expected int64 (convert with .to(DType::Int64))");
  EXPECT_ERROR(index_select(x, 0, values({1}, {1}).to(DType::BFloat16)),
               "index_select: index is bfloat16 but expected int64 (convert with .to(DType::Int64))");
  EXPECT_ERROR(scatter_add(x, 0, values({0}, {1, 1}), x),
               "scatter_add: index is float32 but expected int64 (convert with .to(DType::Int64))");
  EXPECT_ERROR(gather(x, 1, indices({0, 4}, {1, 2})),
               "gather: index 4 at position 1 is out of range for dimension 1 of size 4");
  EXPECT_ERROR(gather(x, 1, indices({-1}, {1, 1})),
               "gather: index -1 at position 0 is out of range for dimension 1 of size 4");
  EXPECT_ERROR(index_select(x, 0, indices({0, -1}, {2})),
               "index_select: index -1 at position 1 is out of range for dimension 0 of size 3");
  EXPECT_ERROR(index_select(x, -1, indices({4}, {})),
               "index_select: index 4 at position 0 is out of range for dimension 1 of size 4");
  EXPECT_ERROR(gather(x, 1, indices({0, 0}, {2})), "gather: index has 1 dimensions but input has 2");
  EXPECT_ERROR(gather(x, 1, Tensor::zeros({4, 1}, DType::Int64, device())),
               "gather: index has shape [4, 1] but input has shape [3, 4] (size 4 > 3 at dimension 0)");
  EXPECT_ERROR(index_select(x, 0, Tensor::zeros({1, 1}, DType::Int64, device())),
               "index_select: index has shape [1, 1]");
  EXPECT_ERROR(index_select(x.to(DType::BFloat16), 0, indices({0}, {1})),
               "index_select: got bfloat16 but expected float32");
  const Device elsewhere = device().is_cuda() ? Device::cpu(0) : Device::cpu(1);
  EXPECT_ERROR(gather(x, 0, Tensor::zeros({1, 1}, DType::Int64, elsewhere)),
               "gather: expected all tensors on one device");
}

TEST_P(ReductionOpsTest, IndexingGradientsAccumulateRepeats) {
  const Tensor x = Tensor::zeros({2, 3}, device()).set_requires_grad();
  sum(index_select(x, 1, indices({2, 0, 2}, {3}))).backward();
  expect_values(x.grad(), {1, 0, 2, 1, 0, 2}, {2, 3});
  const Tensor y = Tensor::zeros({2, 3}, device()).set_requires_grad();
  gather(y, 1, indices({1, 1, 0, 2}, {2, 2})).backward(values({1, 2, 3, 4}, {2, 2}));
  expect_values(y.grad(), {0, 3, 0, 3, 0, 4}, {2, 3});
}

// torch.scatter_add against a loop over index's positions, along each dim, with repeated indices and a src larger than
// index (its other elements unread); the gradients: x's passes through, src's is the incoming one gathered at index.
TEST_P(ReductionOpsTest, ScatterAddMatchesALoopOverTheIndex) {
  manual_seed(33);
  const Tensor x = Tensor::randn({3, 4}, device());
  const Tensor src = Tensor::randn({3, 5}, device());
  const std::vector<int64_t> index_values = {2, 0, 2, 1, 0, 0};  // [2, 3]
  const auto X = to_double(x), S = to_double(src);
  for (int64_t dim : {0, 1}) {
    SCOPED_TRACE(dim);
    const int64_t limit = dim == 0 ? 3 : 4;
    std::vector<int64_t> clipped = index_values;
    for (int64_t& v : clipped) v %= limit;
    std::vector<double> expected = X, grad_src(15, 0.0);
    const std::vector<double> g = to_double(Tensor::arange(12, DType::Float32));  // the incoming gradient 0..11
    for (int64_t i = 0; i < 2; ++i)
      for (int64_t j = 0; j < 3; ++j) {
        const int64_t at = dim == 0 ? clipped[i * 3 + j] * 4 + j : i * 4 + clipped[i * 3 + j];
        expected[at] += S[i * 5 + j];
        grad_src[i * 5 + j] = g[at];
      }
    const Tensor xg = x.detach().set_requires_grad();
    const Tensor sg = src.detach().set_requires_grad();
    const Tensor out = scatter_add(xg, dim, indices(clipped, {2, 3}), sg);
    expect_values(out, expected, {3, 4});
    out.backward(Tensor::arange(12, DType::Float32, device()).reshape({3, 4}));
    expect_values(xg.grad(), g, {3, 4});
    expect_values(sg.grad(), grad_src, {3, 5});
  }
  EXPECT_ERROR(scatter_add(x, 1, indices({0, 0, 0, 0, 0, 0}, {1, 6}), src),
               "scatter_add: index has shape [1, 6] but src has shape [3, 5] (size 6 > 5 at dimension 1)");
  EXPECT_ERROR(scatter_add(x, 0, indices({0}, {1}), src), "scatter_add: index has 1 dimensions but input has 2");
  EXPECT_ERROR(scatter_add(x, 0, indices({3}, {1, 1}), src),
               "scatter_add: index 3 at position 0 is out of range for dimension 0 of size 3");
  EXPECT_ERROR(scatter_add(x, 0, indices({0}, {1, 1}), src.to(DType::BFloat16)),
               "scatter_add: got float32 and bfloat16; expected one dtype");
}

TEST_P(ReductionOpsTest, OneHotAndStack) {
  expect_int64_values(one_hot(indices({2, 0, 1}, {3}), 4), {0, 0, 1, 0, 1, 0, 0, 0, 0, 1, 0, 0}, {3, 4});
  expect_int64_values(one_hot(indices({1, 0}, {2, 1})), {0, 1, 1, 0}, {2, 1, 2});
  expect_int64_values(one_hot(indices({}, {0}), 2), {}, {0, 2});
  expect_values(one_hot(indices({1}, {}), 3).to(DType::Float32), {0, 1, 0}, {3});
  EXPECT_ERROR(one_hot(indices({3}, {1}), 3), "one_hot: index 3 at position 0 is out of range for 3 classes");
  EXPECT_ERROR(one_hot(indices({0, -1}, {2}), 3), "one_hot: index -1 at position 1 is out of range for 3 classes");
  EXPECT_ERROR(one_hot(values({1}, {1}), 3),
               "one_hot: index is float32 but expected int64 (convert with .to(DType::Int64))");
  EXPECT_ERROR(one_hot(indices({}, {0})), "one_hot: cannot infer num_classes from empty indices");
  const Tensor a = values({1, 2}, {2}), b = values({3, 4}, {2});
  expect_values(stack({a, b}), {1, 2, 3, 4}, {2, 2});
  expect_values(stack({a, b}, -1), {1, 3, 2, 4}, {2, 2});
  expect_values(cat({values({1, 2}, {2, 1}), values({3, 4, 5, 6}, {2, 2})}, -1), {1, 3, 4, 2, 5, 6}, {2, 3});
  EXPECT_ERROR(stack({a, values({1}, {1})}), "stack: tensor 1 has shape [1] but expected [2]");
  EXPECT_ERROR(stack({a}, 2), "stack: dimension 2 is out of range [-2, 1]");
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(ReductionOpsTest);

}  // namespace
}  // namespace tandem
