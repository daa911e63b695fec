#include "support/test_support.h"

#include <cmath>

namespace tandem {
namespace {

TEST(Random, SameSeedSameValuesOnEveryDevice) {
  manual_seed(42);
  const std::vector<float> cpu0 = Tensor::randn({100}).to_vector();
  manual_seed(42);
  const std::vector<float> cpu1 = Tensor::randn({100}, Device::cpu(1)).to_vector();
  EXPECT_EQ(cpu0, cpu1);
  if (cuda_device_count() > 0) {
    manual_seed(42);
    EXPECT_EQ(Tensor::randn({100}, Device::cuda(0)).to_vector(), cpu0);
  }
  manual_seed(43);
  EXPECT_NE(Tensor::randn({100}).to_vector(), cpu0);
}

TEST(Random, StateRestoresTheStream) {
  manual_seed(7);
  Tensor::rand({10});
  const GeneratorState state = generator_state();
  const std::vector<float> next = Tensor::rand({5}).to_vector();
  set_generator_state(state);
  EXPECT_EQ(Tensor::rand({5}).to_vector(), next);
}

TEST(Random, Distributions) {
  manual_seed(3);
  const std::vector<float> u = Tensor::uniform({100000}, -2.0f, 3.0f).to_vector();
  double mean = 0;
  for (float v : u) {
    ASSERT_GE(v, -2.0f);
    ASSERT_LT(v, 3.0f);
    mean += v;
  }
  EXPECT_NEAR(mean / u.size(), 0.5, 0.02);
  const std::vector<float> n = Tensor::randn({100000}).to_vector();
  double m = 0, m2 = 0;
  for (float v : n) {
    m += v;
    m2 += static_cast<double>(v) * v;
  }
  m /= n.size();
  EXPECT_NEAR(m, 0.0, 0.02);
  EXPECT_NEAR(m2 / n.size() - m * m, 1.0, 0.02);
  EXPECT_ERROR(Tensor::uniform({2}, 1.0f, 1.0f), "low (1) must be less than high (1)");
}

}  // namespace
}  // namespace tandem
