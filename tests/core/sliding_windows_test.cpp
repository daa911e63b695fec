// The window arithmetic of the image kernels (core/src/sliding_windows.h): output_at, the gather order of the CUDA
// col2im, against tap_at over covering_outputs, the CPU's definition, on a grid of geometries, in 64 and 32 bits.
#include "sliding_windows.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <set>
#include <utility>

namespace tandem::testing {
namespace {

using backend::BasicWindowAxis;

// Every (output, tap) pair whose window reads input position i, found both ways.
template <typename Index>
void expect_both_ways_agree(const BasicWindowAxis<Index>& a) {
  for (Index i = 0; i < a.in; ++i) {
    std::set<std::pair<Index, Index>> by_outputs, by_taps;
    const auto range = backend::covering_outputs(a, i, false);
    for (Index o = range.first; o < range.last; ++o) {
      const Index t = backend::tap_at(a, o, i);
      if (t >= 0) by_outputs.insert({o, t});
    }
    Index previous = -1;
    for (Index t = 0; t < a.kernel; ++t) {
      const Index o = backend::output_at(a, t, i);
      if (o < 0) continue;
      EXPECT_EQ(backend::window_begin(a, o, false) + t * a.dilation, i);
      if (previous >= 0) EXPECT_LT(o, previous) << "taps in order visit the outputs from the last";
      previous = o;
      by_taps.insert({o, t});
    }
    EXPECT_EQ(by_outputs, by_taps) << "input " << i << ", in " << a.in << " kernel " << a.kernel << " stride "
                                   << a.stride << " padding " << a.padding << " dilation " << a.dilation;
  }
}

TEST(SlidingWindows, OutputAtFindsTheOutputsThatCoverAnInputPosition) {
  int geometries = 0;
  for (int64_t in = 1; in <= 9; ++in)
    for (int64_t kernel = 1; kernel <= 4; ++kernel)
      for (int64_t stride = 1; stride <= 3; ++stride)
        for (int64_t padding = 0; padding <= 2; ++padding)
          for (int64_t dilation = 1; dilation <= 3; ++dilation) {
            const int64_t span = dilation * (kernel - 1) + 1;
            if (in + 2 * padding < span) continue;
            const backend::WindowAxis a{.in = in,
                                        .out = (in + 2 * padding - span) / stride + 1,
                                        .kernel = kernel,
                                        .stride = stride,
                                        .padding = padding,
                                        .dilation = dilation};
            expect_both_ways_agree(a);
            expect_both_ways_agree(backend::axis_as<int32_t>(a));
            ++geometries;
          }
  EXPECT_GT(geometries, 500);
}

TEST(SlidingWindows, NarrowedWindowsKeepEveryValue) {
  const backend::Conv2dWindows c{.batch = 5, .channels = 3, .h = {7, 4, 3, 2, 1, 1}, .w = {9, 9, 1, 1, 0, 1}};
  const auto narrow = backend::windows_as<int32_t>(c);
  EXPECT_EQ(narrow.batch, 5);
  EXPECT_EQ(narrow.channels, 3);
  EXPECT_EQ(narrow.h.in, 7);
  EXPECT_EQ(narrow.h.out, 4);
  EXPECT_EQ(narrow.h.kernel, 3);
  EXPECT_EQ(narrow.h.stride, 2);
  EXPECT_EQ(narrow.h.padding, 1);
  EXPECT_EQ(narrow.h.dilation, 1);
  EXPECT_EQ(narrow.w.in, 9);
  EXPECT_EQ(narrow.w.padding, 0);
}

}  // namespace
}  // namespace tandem::testing
