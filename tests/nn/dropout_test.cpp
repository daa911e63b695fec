// Dropout: the kept fraction and the scaling, reproducibility under a seed, generator streams, eval identity, errors.
#include <cmath>

#include "support/test_support.h"

namespace tandem {
namespace {

class DropoutTest : public testing::EveryDevice {};

TEST_P(DropoutTest, KeepsAboutOneMinusPAndScalesTheRest) {
  manual_seed(21);
  for (double p : {0.1, 0.5, 0.8}) {
    nn::Dropout dropout(p);
    const int64_t n = 200000;
    const std::vector<float> y = dropout(Tensor::ones({n}, device())).to_vector();
    int64_t kept = 0;
    for (float value : y) {
      if (value == 0.0f) continue;
      ++kept;
      ASSERT_FLOAT_EQ(value, static_cast<float>(1.0 / (1.0 - p)));
    }
    // The kept count is Binomial(n, 1 - p): within 5 standard deviations.
    const double expected = n * (1.0 - p), sd = std::sqrt(n * p * (1.0 - p));
    EXPECT_NEAR(static_cast<double>(kept), expected, 5 * sd) << "p = " << p;
  }
}

TEST_P(DropoutTest, ReproducibleUnderASeedAndDifferentBetweenDraws) {
  nn::Dropout dropout(0.5);
  const Tensor x = Tensor::ones({64}, device());
  manual_seed(5);
  const std::vector<float> first = dropout(x).to_vector();
  const std::vector<float> second = dropout(x).to_vector();
  manual_seed(5);
  EXPECT_EQ(dropout(x).to_vector(), first);
  EXPECT_EQ(dropout(x).to_vector(), second);
  EXPECT_NE(first, second);
  // A device's generator stream gives other masks than the default stream, reproducibly.
  manual_seed(5);
  std::vector<float> on_stream;
  {
    GeneratorStreamGuard guard(device());
    on_stream = dropout(x).to_vector();
  }
  EXPECT_NE(on_stream, first);
  manual_seed(5);
  GeneratorStreamGuard guard(device());
  EXPECT_EQ(dropout(x).to_vector(), on_stream);
}

TEST_P(DropoutTest, IdentityInEvalAndForZeroP) {
  manual_seed(6);
  const Tensor x = Tensor::randn({4, 5}, device());
  nn::Dropout dropout(0.3);
  dropout.eval();
  const GeneratorState before = generator_state();
  EXPECT_EQ(dropout(x).to_vector(), x.to_vector());
  dropout.train();
  nn::Dropout none(0.0);
  EXPECT_EQ(none(x).to_vector(), x.to_vector());
  EXPECT_EQ(generator_state(), before);  // nothing drawn
}

TEST_P(DropoutTest, GradientIsTheMaskTimesTheScale) {
  manual_seed(7);
  nn::Dropout dropout(0.25);
  const Tensor x = Tensor::randn({100}, device()).set_requires_grad();
  const Tensor y = dropout(x);
  sum(y).backward();
  const std::vector<float> values = y.to_vector(), inputs = x.to_vector(), grads = x.grad().to_vector();
  for (size_t i = 0; i < values.size(); ++i) {
    const bool kept = values[i] != 0.0f;
    EXPECT_FLOAT_EQ(grads[i], kept ? 1.0f / 0.75f : 0.0f) << i;
    if (kept) EXPECT_FLOAT_EQ(values[i], inputs[i] / 0.75f) << i;
  }
}

TEST_P(DropoutTest, RejectsBadP) {
  EXPECT_ERROR(nn::Dropout(1.0), "nn::Dropout: p is 1 but expected a probability in [0, 1)");
  EXPECT_ERROR(nn::Dropout(-0.1), "nn::Dropout: p is -0.1");
  EXPECT_ERROR(nn::Dropout(std::nan("")), "nn::Dropout: p is nan");
  nn::Dropout dropout(0.5);
  EXPECT_ERROR(dropout(Tensor()), "nn::Dropout: the input is undefined");
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(DropoutTest);

}  // namespace
}  // namespace tandem
