// The factories beyond empty/zeros/ones/full/rand/randn: randint, multinomial, arange with a step, linspace and the
// *_like functions, against references computed here, with their statistics and errors, on every device.
#include <algorithm>
#include <cmath>
#include <set>
#include <type_traits>

#include "support/test_support.h"

namespace tandem {
namespace {

using testing::expect_int64_values;
using testing::expect_values;

class FactoriesTest : public testing::EveryDevice {};

TEST_P(FactoriesTest, RandintStaysInItsBoundsAndReachesEveryValue) {
  manual_seed(61);
  const Tensor t = Tensor::randint(-3, 4, {20000}, device());
  EXPECT_EQ(t.dtype(), DType::Int64);
  EXPECT_EQ(t.device(), device());
  std::vector<int64_t> counts(7, 0);
  for (int64_t v : t.to_vector_as<int64_t>()) {
    ASSERT_GE(v, -3);
    ASSERT_LT(v, 4);
    ++counts[static_cast<size_t>(v + 3)];
  }
  // Each of the 7 values 20000 / 7 = 2857 times, within 5 standard deviations (sqrt(2857 * 6 / 7) = 49).
  for (int64_t count : counts) EXPECT_NEAR(count, 20000.0 / 7, 250);
}

TEST_P(FactoriesTest, RandintCoversTheWholeInt64Range) {
  manual_seed(62);
  const int64_t lowest = std::numeric_limits<int64_t>::min(), highest = std::numeric_limits<int64_t>::max();
  const std::vector<int64_t> v = Tensor::randint(lowest, highest, {1000}, device()).to_vector_as<int64_t>();
  EXPECT_LT(*std::min_element(v.begin(), v.end()), lowest / 2);
  EXPECT_GT(*std::max_element(v.begin(), v.end()), highest / 2);
  expect_int64_values(Tensor::randint(5, 6, {3}, device()), {5, 5, 5}, {3});
}

TEST_P(FactoriesTest, RandintIsTheSameForTheSameSeedOnEveryDevice) {
  manual_seed(63);
  const std::vector<int64_t> here = Tensor::randint(0, 1000, {64}, device()).to_vector_as<int64_t>();
  manual_seed(63);
  EXPECT_EQ(Tensor::randint(0, 1000, {64}).to_vector_as<int64_t>(), here);  // on cpu:0
  manual_seed(64);
  EXPECT_NE(Tensor::randint(0, 1000, {64}, device()).to_vector_as<int64_t>(), here);
  // One value of the stream per element: a later draw continues the stream where randint left it.
  manual_seed(63);
  Tensor::randint(0, 2, {10}, device());
  EXPECT_EQ(generator_state().counter, 10u);
}

TEST_P(FactoriesTest, RandintErrors) {
  EXPECT_ERROR(Tensor::randint(3, 3, {2}, device()), "Tensor::randint: low (3) must be less than high (3)");
  EXPECT_ERROR(Tensor::randint(0, 2, {-1}, device()), "Tensor::randint");
}

TEST_P(FactoriesTest, MultinomialFrequenciesFollowTheWeights) {
  manual_seed(65);
  // Not normalized; category 2 has weight 0 and must never be drawn.
  const std::vector<float> weights = {1, 2, 0, 5};
  const Tensor probs = Tensor::from_vector(weights, {4}, device());
  const Tensor samples = multinomial(probs, 16000, /*replacement=*/true);
  EXPECT_EQ(samples.dtype(), DType::Int64);
  EXPECT_EQ(samples.device(), device());
  EXPECT_EQ(samples.shape(), (Shape{16000}));
  std::vector<int64_t> counts(4, 0);
  for (int64_t v : samples.to_vector_as<int64_t>()) ++counts[static_cast<size_t>(v)];
  EXPECT_EQ(counts[2], 0);
  // Expected 2000, 4000, 10000, each within 5 standard deviations (at most sqrt(16000 * 0.25) = 63).
  EXPECT_NEAR(counts[0], 2000, 250);
  EXPECT_NEAR(counts[1], 4000, 300);
  EXPECT_NEAR(counts[3], 10000, 320);
}

TEST_P(FactoriesTest, MultinomialWithoutReplacementNeverRepeats) {
  manual_seed(66);
  const Tensor probs = Tensor::from_vector({0.1f, 0, 3, 1, 2, 0.5f, 0, 0, 1, 1, 1, 1}, {2, 6}, device());
  const Tensor samples = multinomial(probs, 4);
  EXPECT_EQ(samples.shape(), (Shape{2, 4}));
  const std::vector<int64_t> v = samples.to_vector_as<int64_t>();
  const std::set<int64_t> row0(v.begin(), v.begin() + 4), row1(v.begin() + 4, v.end());
  EXPECT_EQ(row0.size(), 4u);
  EXPECT_EQ(row0.count(1), 0u);                      // weight 0
  EXPECT_EQ(row1, (std::set<int64_t>{2, 3, 4, 5}));  // the only 4 positive weights of row 1
  // Every positive category drawn: the whole row's order is a permutation of them.
  const Tensor all = multinomial(Tensor::from_vector({1, 1, 1}, {3}, device()), 3);
  std::vector<int64_t> order = all.to_vector_as<int64_t>();
  std::sort(order.begin(), order.end());
  EXPECT_EQ(order, (std::vector<int64_t>{0, 1, 2}));
}

TEST_P(FactoriesTest, MultinomialWithoutReplacementPicksHeavyCategoriesFirst) {
  // The first draw of a row without replacement is a draw with the row's weights: over many rows, its frequencies.
  manual_seed(67);
  const Tensor probs = Tensor::from_vector({1, 3}, {1, 2}, device()).expand({8000, 2}).contiguous();
  const std::vector<int64_t> v = multinomial(probs, 2).to_vector_as<int64_t>();
  int64_t heavy_first = 0;
  for (size_t r = 0; r < 8000; ++r) {
    ASSERT_NE(v[2 * r], v[2 * r + 1]);
    heavy_first += v[2 * r] == 1;
  }
  EXPECT_NEAR(heavy_first, 6000, 200);  // 3 / 4 of the rows, sd sqrt(8000 * 3 / 16) = 39
}

TEST_P(FactoriesTest, MultinomialIsTheSameForTheSameSeedOnEveryDevice) {
  const std::vector<float> weights = {0.2f, 0.5f, 0.1f, 0.9f, 0.3f};
  manual_seed(68);
  const std::vector<int64_t> here =
      multinomial(Tensor::from_vector(weights, {5}, device()), 50, true).to_vector_as<int64_t>();
  manual_seed(68);
  EXPECT_EQ(multinomial(Tensor::from_vector(weights, {5}), 50, true).to_vector_as<int64_t>(), here);
}

TEST_P(FactoriesTest, MultinomialErrors) {
  const Tensor probs = Tensor::from_vector({1, 0, 2}, {3}, device());
  EXPECT_ERROR(multinomial(probs, 3),
               "multinomial: without replacement, num_samples (3) must be at most the number "
               "of positive weights (2) in row 0");
  EXPECT_ERROR(multinomial(probs, 0), "multinomial: num_samples is 0 but expected at least 1");
  EXPECT_ERROR(multinomial(Tensor::from_vector({1, -1}, {2}, device()), 1),
               "multinomial: row 0 has weight -1 at category 1; expected non-negative finite weights");
  EXPECT_ERROR(multinomial(Tensor::from_vector({1, std::nanf("")}, {2}, device()), 1), "has weight nan at category 1");
  EXPECT_ERROR(multinomial(Tensor::from_vector({1, INFINITY}, {2}, device()), 1), "has weight inf at category 1");
  EXPECT_ERROR(multinomial(Tensor::from_vector({1, 1, 0, 0}, {2, 2}, device()), 1, true),
               "multinomial: row 1 has no positive weight");
  EXPECT_ERROR(multinomial(Tensor::ones({2, 2, 2}, device()), 1),
               "multinomial: expected a 1-D or 2-D tensor of weights, got shape [2, 2, 2]");
  EXPECT_ERROR(multinomial(Tensor::ones({2}, DType::Int64, device()), 1),
               "multinomial: got int64 but expected float32");
  // A refused call draws nothing.
  manual_seed(69);
  EXPECT_ERROR(multinomial(probs, 5), "without replacement");
  EXPECT_EQ(generator_state().counter, 0u);
}

TEST_P(FactoriesTest, ArangeWithAStepCountsAsTorch) {
  expect_values(Tensor::arange(0.0, 1.0, 0.25, DType::Float32, device()), {0, 0.25, 0.5, 0.75}, {4});
  // ceil((1 - 0) / 0.3) = 4: 0.9 is short of the end.
  expect_values(Tensor::arange(0.0, 1.0, 0.3, DType::Float32, device()), {0, 0.3, 0.6, 0.9}, {4});
  expect_values(Tensor::arange(2.0, -1.0, -1.5, DType::Float32, device()), {2, 0.5}, {2});
  expect_values(Tensor::arange(1.0, 1.0, 0.5, DType::Float32, device()), {}, {0});
  expect_int64_values(Tensor::arange(0.0, 10.0, 2.5, DType::Int64, device()), {0, 2, 5, 7}, {4});
  // 10 steps of 0.1 from 0 stop short of 1 (float64 rounding as torch's count: ceil(1 / 0.1) = 10).
  EXPECT_EQ(Tensor::arange(0.0, 1.0, 0.1, DType::Float32, device()).numel(), 10);
  const Tensor bf16 = Tensor::arange(0.0, 2.0, 0.5, DType::BFloat16, device());
  EXPECT_EQ(bf16.dtype(), DType::BFloat16);
  expect_values(bf16.to(DType::Float32), {0, 0.5, 1, 1.5}, {4});
}

TEST_P(FactoriesTest, ArangeOverloadsKeepTheirMeaning) {
  // The integer overloads: int64 by default, and an explicit dtype.
  const Tensor five = Tensor::arange(5);
  expect_int64_values(five, {0, 1, 2, 3, 4}, {5});
  expect_int64_values(Tensor::arange(2, 5), {2, 3, 4}, {3});
  const Tensor typed = Tensor::arange(0, 5, DType::Int64, device());
  expect_int64_values(typed, {0, 1, 2, 3, 4}, {5});
  EXPECT_EQ(typed.device(), device());
  EXPECT_EQ(Tensor::arange(0, 3, DType::Float32, device()).dtype(), DType::Float32);
  // Integer bounds with a step: the step overload, float32 unless a dtype is given.
  const Tensor stepped = Tensor::arange(0, 5, 2);
  EXPECT_EQ(stepped.dtype(), DType::Float32);
  expect_values(stepped, {0, 2, 4}, {3});
  expect_int64_values(Tensor::arange(0, 5, 2, DType::Int64, device()), {0, 2, 4}, {3});
  static_assert(std::is_same_v<decltype(Tensor::arange(5)), Tensor>);
}

TEST_P(FactoriesTest, ArangeErrors) {
  EXPECT_ERROR(Tensor::arange(0.0, 1.0, 0.0, DType::Float32, device()), "Tensor::arange: step must be non-zero");
  EXPECT_ERROR(Tensor::arange(0.0, 5.0, -1.0, DType::Float32, device()),
               "Tensor::arange: step -1 does not lead from start 0 to end 5 (expected the sign of end - start)");
  EXPECT_ERROR(Tensor::arange(0.0, INFINITY, 1.0, DType::Float32, device()),
               "Tensor::arange: start 0, end inf and step 1 must be finite");
  EXPECT_ERROR(Tensor::arange(0.0, 1e300, 1e-300, DType::Float32, device()), "is too long");
  EXPECT_ERROR(Tensor::arange(1e19, 1.1e19, 1e18, DType::Int64, device()), "Tensor::arange");
}

TEST_P(FactoriesTest, LinspaceIncludesBothEnds) {
  const Tensor t = Tensor::linspace(-1.0, 2.0, 7, device());
  EXPECT_EQ(t.dtype(), DType::Float32);
  expect_values(t, {-1, -0.5, 0, 0.5, 1, 1.5, 2}, {7});
  EXPECT_EQ(t.to_vector().back(), 2.0f);
  // 0.1 is not a float: the last value is still exactly the end, as torch's second half counts from it.
  const std::vector<float> tenths = Tensor::linspace(0.0, 0.7, 8, device()).to_vector();
  EXPECT_EQ(tenths.back(), 0.7f);
  for (size_t i = 0; i < tenths.size(); ++i) EXPECT_NEAR(tenths[i], 0.1 * static_cast<double>(i), 1e-7);
  expect_values(Tensor::linspace(3.0, 5.0, 1, device()), {3}, {1});
  expect_values(Tensor::linspace(3.0, 5.0, 0, device()), {}, {0});
  expect_values(Tensor::linspace(5.0, 3.0, 3, device()), {5, 4, 3}, {3});
  EXPECT_ERROR(Tensor::linspace(0.0, 1.0, -1, device()), "Tensor::linspace: steps is -1 but expected at least 0");
}

TEST_P(FactoriesTest, LikeFunctionsTakeShapeDtypeAndDevice) {
  for (DType dtype : {DType::Float32, DType::Int64, DType::BFloat16}) {
    SCOPED_TRACE(::testing::Message() << dtype);
    // A non-contiguous source: the results are new contiguous tensors.
    const Tensor x = Tensor::zeros({3, 2}, dtype, device()).t();
    for (const Tensor& t : {empty_like(x), zeros_like(x), ones_like(x)}) {
      EXPECT_EQ(t.shape(), (Shape{2, 3}));
      EXPECT_EQ(t.dtype(), dtype);
      EXPECT_EQ(t.device(), device());
      EXPECT_TRUE(t.is_contiguous());
    }
    expect_values(zeros_like(x).to(DType::Float32), {0, 0, 0, 0, 0, 0}, {2, 3});
    expect_values(ones_like(x).to(DType::Float32), {1, 1, 1, 1, 1, 1}, {2, 3});
  }
  const Tensor x = Tensor::ones({2, 3}, device()).set_requires_grad();
  EXPECT_FALSE(zeros_like(x).requires_grad());
  EXPECT_ERROR(zeros_like(Tensor()), "zeros_like: input is an undefined tensor");
}

TEST_P(FactoriesTest, RandnLikeDrawsAsRandn) {
  const Tensor x = Tensor::zeros({4, 5}, device());
  manual_seed(70);
  const Tensor drawn = randn_like(x);
  manual_seed(70);
  expect_values(drawn, testing::to_double(Tensor::randn({4, 5})), {4, 5}, 0, 0);
  EXPECT_EQ(drawn.device(), device());
  manual_seed(70);
  const Tensor bf16 = randn_like(Tensor::zeros({4, 5}, DType::BFloat16, device()));
  EXPECT_EQ(bf16.dtype(), DType::BFloat16);
  manual_seed(70);
  expect_values(bf16.to(DType::Float32),
                testing::to_double(Tensor::randn({4, 5}).to(DType::BFloat16).to(DType::Float32)), {4, 5}, 0, 0);
  EXPECT_ERROR(randn_like(Tensor::zeros({2}, DType::Int64, device())),
               "randn_like: the input is int64 but expected a floating point dtype (float32, bfloat16)");
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(FactoriesTest);

}  // namespace
}  // namespace tandem
