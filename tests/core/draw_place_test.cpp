// DropoutMask, the dropout rule of the kernels that drop in place (core/src/draw_place.h), against nn::dropout's rule
// uniform_value(bits, 0, 1) >= float(p) (Note [Dropout thresholds]), and DrawPlace's resolution of a captured place.
#include "draw_place.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "tandem/core/splitmix64.h"
#include "uniform_value.h"

namespace tandem::detail {
namespace {

TEST(DropoutMask, KeepsExactlyTheElementsThatTheUniformRuleKeeps) {
  const std::vector<double> probabilities = {1e-9, 0.1, 0.2, 0.25, 1.0 / 3.0, 0.5, 0.7, 0.999999, 0x1.0p-24,
                                             0x1.8p-24, 1.0 - 0x1.0p-24};
  for (const double p : probabilities) {
    SCOPED_TRACE(p);
    const DropoutMask mask = DropoutMask::of(p, {.key = 77, .first = 5});
    EXPECT_TRUE(mask.active());
    EXPECT_EQ(mask.scale, static_cast<float>(1.0 / (1.0 - p)));
    int64_t dropped = 0;
    for (uint64_t i = 0; i < 200000; ++i) {
      const bool kept = uniform_value(splitmix64(77, 5 + i), 0.0f, 1.0f) >= static_cast<float>(p);
      ASSERT_EQ(mask.factor(i) != 0.0f, kept) << "element " << i;
      if (!kept) ++dropped;
    }
    if (p >= 0.1) EXPECT_NEAR(static_cast<double>(dropped) / 200000.0, p, 0.01);
  }
  // p = 0.5 keeps u >= 0.5: the top 24 bits at least 2^23.
  const DropoutMask half = DropoutMask::of(0.5, {});
  EXPECT_EQ(half.threshold, 1u << 23);
}

TEST(DropoutMask, ZeroKeepsEverythingUnscaled) {
  const DropoutMask none = DropoutMask::of(0.0, {.key = 3});
  EXPECT_FALSE(none.active());
  EXPECT_EQ(none.factor(12), 1.0f);
}

TEST(DrawPlace, ACapturedPlaceResolvesToTheWordsTheHostWrote) {
  const uint64_t words[2] = {0x1234, 1000};
  const DrawPlace captured{.words = words, .first = 7};
  const DrawPlace eager = captured.resolved();
  EXPECT_EQ(eager.words, nullptr);
  EXPECT_EQ(eager.key, 0x1234u);
  EXPECT_EQ(eager.first, 1007u);
  EXPECT_EQ(eager.bits(3), splitmix64(0x1234, 1010));
}

}  // namespace
}  // namespace tandem::detail
