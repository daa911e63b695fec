// Dropout: the kept fraction and the scaling, reproducibility under a seed, generator streams, eval identity, errors.
// Dropout2d: whole channels kept or zeroed, the zeroed fraction, the mask drawn as Dropout's, eval identity, the
// gradient, errors.
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

// Note [Dropout drawn in place]: the kernel's mask is Tensor::rand(shape) >= p over the same draws, bit for bit, for
// a strided input whose size is no multiple of 4, and the backward draws it again.
TEST_P(DropoutTest, MaskIsTheUniformDrawsComparedWithP) {
  const double p = 0.3;
  const Tensor x = Tensor::randn({5, 37}, device()).t().set_requires_grad();  // [37, 5], not contiguous
  const Tensor w = Tensor::randn({37, 5}, device());
  manual_seed(9);
  const Tensor y = nn::dropout(x, p);
  sum(y * w).backward();
  manual_seed(9);
  const Tensor scaled_mask =
      (Tensor::rand({37, 5}, device()) >= static_cast<float>(p)) * static_cast<float>(1.0 / (1.0 - p));
  EXPECT_EQ(y.to_vector(), (x.detach() * scaled_mask).to_vector());
  EXPECT_EQ(x.grad().to_vector(), (w * scaled_mask).to_vector());
  EXPECT_EQ(y.grad_fn()->name(), "DropoutBackward");
  EXPECT_ERROR(dropout_drawn_in_place(x.to(DType::BFloat16), p), "dropout");
  EXPECT_ERROR(dropout_drawn_in_place(x, 1.0), "dropout: p is 1 but expected a probability in [0, 1)");
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

// Per (n, c) plane of y (planes of `plane` values, in order): whether it was kept. Expects every value of a kept
// plane to be its input's times `scale` and every value of a dropped one to be 0.
std::vector<bool> dropout2d_kept_planes(const Tensor& y, const Tensor& x, int64_t plane, float scale) {
  const std::vector<float> ys = y.to_vector(), xs = x.to_vector();
  std::vector<bool> kept;
  for (size_t start = 0; start < ys.size(); start += static_cast<size_t>(plane)) {
    kept.push_back(ys[start] != 0.0f);
    for (int64_t k = 0; k < plane; ++k) {
      const size_t at = start + static_cast<size_t>(k);
      if (kept.back()) {
        EXPECT_FLOAT_EQ(ys[at], xs[at] * scale) << "at " << at;
      } else {
        EXPECT_EQ(ys[at], 0.0f) << "at " << at;
      }
    }
  }
  return kept;
}

TEST_P(DropoutTest, Dropout2dZeroesWholeChannelsAboutPOfThem) {
  manual_seed(22);
  for (double p : {0.2, 0.6}) {
    nn::Dropout2d dropout(p);
    const int64_t n = 40, channels = 500, height = 3, width = 2;
    // Inputs away from 0, so that a kept value is never 0.
    const Tensor x = Tensor::rand({n, channels, height, width}, device()) + 1.0f;
    const Tensor y = dropout(x);
    ASSERT_EQ(y.shape(), x.shape());
    const std::vector<bool> kept = dropout2d_kept_planes(y, x, height * width, static_cast<float>(1.0 / (1.0 - p)));
    const int64_t planes = n * channels;
    ASSERT_EQ(kept.size(), static_cast<size_t>(planes));
    int64_t zeroed = 0;
    for (bool k : kept) zeroed += k ? 0 : 1;
    // The zeroed count is Binomial(planes, p): within 5 standard deviations.
    EXPECT_NEAR(static_cast<double>(zeroed), planes * p, 5 * std::sqrt(planes * p * (1.0 - p))) << "p = " << p;
  }
}

TEST_P(DropoutTest, Dropout2dMaskIsDrawnAsDropoutDrawsIt) {
  // The mask is Tensor::rand of [N, C, 1, 1] ([C, 1, 1] unbatched) from the same generator, kept where u >= p.
  const double p = 0.5;
  nn::Dropout2d dropout(p);
  const Tensor x = Tensor::rand({3, 4, 2, 2}, device()) + 1.0f;
  manual_seed(23);
  const std::vector<float> u = Tensor::rand({3, 4, 1, 1}, device()).to_vector();
  manual_seed(23);
  const std::vector<bool> kept = dropout2d_kept_planes(dropout(x), x, 4, 2.0f);
  for (size_t plane = 0; plane < u.size(); ++plane) EXPECT_EQ(kept[plane], u[plane] >= p) << plane;

  const Tensor image = Tensor::rand({12, 2, 2}, device()) + 1.0f;
  manual_seed(23);
  const Tensor y = dropout(image);
  EXPECT_EQ(y.shape(), (Shape{12, 2, 2}));
  EXPECT_EQ(dropout2d_kept_planes(y, image, 4, 2.0f), kept);  // the same twelve draws
}

TEST_P(DropoutTest, Dropout2dReproducibleUnderASeed) {
  nn::Dropout2d dropout(0.5);
  const Tensor x = Tensor::ones({4, 16, 2, 2}, device());
  manual_seed(8);
  const std::vector<float> first = dropout(x).to_vector();
  const std::vector<float> second = dropout(x).to_vector();
  manual_seed(8);
  EXPECT_EQ(dropout(x).to_vector(), first);
  EXPECT_EQ(dropout(x).to_vector(), second);
  EXPECT_NE(first, second);
}

TEST_P(DropoutTest, Dropout2dIdentityInEvalAndForZeroP) {
  manual_seed(9);
  const Tensor x = Tensor::randn({2, 3, 4, 5}, device());
  const Tensor image = Tensor::randn({3, 4, 5}, device());
  nn::Dropout2d dropout(0.4);
  dropout.eval();
  const GeneratorState before = generator_state();
  EXPECT_EQ(dropout(x).to_vector(), x.to_vector());
  EXPECT_EQ(dropout(image).to_vector(), image.to_vector());
  EXPECT_EQ(nn::dropout2d(x, 0.4, /*training=*/false).to_vector(), x.to_vector());
  nn::Dropout2d none(0.0);
  EXPECT_EQ(none(x).to_vector(), x.to_vector());
  EXPECT_EQ(generator_state(), before);  // nothing drawn
}

TEST_P(DropoutTest, Dropout2dGradientIsTheMaskTimesTheScale) {
  manual_seed(10);
  nn::Dropout2d dropout(0.25);
  const Tensor x = (Tensor::rand({5, 6, 2, 3}, device()) + 1.0f).set_requires_grad();
  const Tensor y = dropout(x);
  sum(y * 2.0f).backward();
  const std::vector<bool> kept = dropout2d_kept_planes(y, x, 6, 1.0f / 0.75f);
  const std::vector<float> grads = x.grad().to_vector();
  for (size_t i = 0; i < grads.size(); ++i) EXPECT_FLOAT_EQ(grads[i], kept[i / 6] ? 2.0f / 0.75f : 0.0f) << i;
}

TEST_P(DropoutTest, Dropout2dErrors) {
  EXPECT_ERROR(nn::Dropout2d(1.0), "nn::Dropout2d: p is 1 but expected a probability in [0, 1)");
  EXPECT_ERROR(nn::Dropout2d(-0.5), "nn::Dropout2d: p is -0.5");
  EXPECT_ERROR(nn::Dropout2d(std::nan("")), "nn::Dropout2d: p is nan");
  nn::Dropout2d dropout(0.5);
  EXPECT_ERROR(dropout(Tensor::ones({4, 5}, device())),
               "nn::Dropout2d: input has shape [4, 5] but expected [N, C, H, W] or unbatched [C, H, W]");
  EXPECT_ERROR(dropout(Tensor::ones({1, 2, 3, 4, 5}, device())), "nn::Dropout2d: input has shape [1, 2, 3, 4, 5]");
  EXPECT_ERROR(dropout(Tensor()), "nn::Dropout2d: the input is undefined");
  dropout.eval();
  EXPECT_ERROR(dropout(Tensor::ones({4, 5}, device())), "nn::Dropout2d: input has shape [4, 5]");
  EXPECT_ERROR(nn::dropout2d(Tensor::ones({2, 2, 2}, device()), 1.5), "nn::dropout2d: p is 1.5");
  EXPECT_ERROR(nn::dropout2d(Tensor::ones({2}, device()), 0.5), "nn::dropout2d: input has shape [2]");
  EXPECT_EQ(dropout.extra_repr(), "p=0.500000");
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(DropoutTest);

}  // namespace
}  // namespace tandem
