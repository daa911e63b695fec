// nn::max_pool2d, avg_pool2d, adaptive_avg_pool2d and their layers (over the poolings of tandem/core/image_ops.h):
// values and max pooling's argmax against float64 direct loops on a grid of kernels, strides, paddings, dilations
// and ceil_mode; ties and the gradient to the first maximum; gradient checks; unbatched inputs; layers; errors.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <sstream>

#include "support/test_support.h"

namespace tandem {
namespace {

using testing::expect_values;
using testing::to_double;

struct PoolCase {
  int64_t n, c, h, w;
  Size2 kernel, stride, padding, dilation;
  bool ceil_mode;
};

std::string describe(const PoolCase& p) {
  std::ostringstream os;
  os << p.n << "x" << p.c << "x" << p.h << "x" << p.w << " k=" << p.kernel[0] << "," << p.kernel[1]
     << " s=" << p.stride[0] << "," << p.stride[1] << " p=" << p.padding[0] << "," << p.padding[1]
     << " d=" << p.dilation[0] << "," << p.dilation[1] << (p.ceil_mode ? " ceil" : "");
  return os.str();
}

// PyTorch's output size (image_ops.h).
int64_t pooled(int64_t in, int64_t k, int64_t s, int64_t p, int64_t d, bool ceil_mode) {
  const int64_t room = in + 2 * p - d * (k - 1) - 1;
  int64_t out = (ceil_mode ? (room + s - 1) / s : room / s) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

// Distinct values in a shuffled order, 0.1 apart: no ties, and far from each other relative to gradcheck's step.
Tensor distinct_values(const Shape& shape, Device device, unsigned seed) {
  std::vector<float> values(static_cast<size_t>(numel_of(shape)));
  for (size_t i = 0; i < values.size(); ++i) values[i] = 0.1f * static_cast<float>(i) - 1.0f;
  std::shuffle(values.begin(), values.end(), std::mt19937(seed));
  return Tensor::from_vector(values, shape, device);
}

struct Pooled {
  std::vector<double> values;
  std::vector<int64_t> argmax;
  int64_t oh, ow;
};

// Max or average over the windows of case p, in float64 (the average dividing as count_include_pad says).
Pooled pool_reference(const PoolCase& p, const std::vector<double>& x, bool max, bool count_include_pad) {
  Pooled r{{},
           {},
           pooled(p.h, p.kernel[0], p.stride[0], p.padding[0], p.dilation[0], p.ceil_mode),
           pooled(p.w, p.kernel[1], p.stride[1], p.padding[1], p.dilation[1], p.ceil_mode)};
  for (int64_t q = 0; q < p.n * p.c; ++q)
    for (int64_t y = 0; y < r.oh; ++y)
      for (int64_t z = 0; z < r.ow; ++z) {
        double best = -std::numeric_limits<double>::infinity(), total = 0;
        int64_t at = -1, inside = 0;
        for (int64_t i = 0; i < p.kernel[0]; ++i)
          for (int64_t j = 0; j < p.kernel[1]; ++j) {
            const int64_t a = y * p.stride[0] - p.padding[0] + i * p.dilation[0];
            const int64_t b = z * p.stride[1] - p.padding[1] + j * p.dilation[1];
            if (a < 0 || a >= p.h || b < 0 || b >= p.w) continue;
            const double v = x[(q * p.h + a) * p.w + b];
            if (at < 0 || v > best) {
              best = v;
              at = a * p.w + b;
            }
            total += v;
            ++inside;
          }
        // The padded window: within [-padding, in + padding) on each axis.
        const auto extent = [](int64_t start, int64_t k, int64_t in, int64_t pad) {
          return std::min(start + k, in + pad) - start;
        };
        const int64_t padded = extent(y * p.stride[0] - p.padding[0], p.kernel[0], p.h, p.padding[0]) *
                               extent(z * p.stride[1] - p.padding[1], p.kernel[1], p.w, p.padding[1]);
        r.values.push_back(max ? best : total / static_cast<double>(count_include_pad ? padded : inside));
        r.argmax.push_back(at);
      }
  return r;
}

std::vector<PoolCase> pool_grid() {
  return {
      {2, 3, 6, 6, {2, 2}, {2, 2}, {0, 0}, {1, 1}, false}, {1, 2, 7, 5, {3, 2}, {2, 1}, {1, 1}, {1, 1}, false},
      {1, 2, 7, 8, {3, 3}, {2, 3}, {1, 0}, {1, 1}, true},  {2, 1, 5, 7, {2, 3}, {3, 2}, {1, 1}, {1, 1}, true},
      {1, 2, 9, 8, {3, 2}, {1, 2}, {1, 1}, {2, 3}, false},  // dilation (max pooling only)
      {1, 1, 8, 9, {2, 3}, {2, 2}, {0, 1}, {3, 2}, true},
  };
}

class PoolingTest : public testing::EveryDevice {};

TEST_P(PoolingTest, MaxPoolMatchesFloat64ReferenceOnAGrid) {
  for (const PoolCase& p : pool_grid()) {
    SCOPED_TRACE(describe(p));
    const Tensor x = Tensor::randn({p.n, p.c, p.h, p.w}, device());
    const Pooled want = pool_reference(p, to_double(x), true, true);
    const Tensor out = nn::max_pool2d(x, {p.kernel[0], p.kernel[1]}, {p.stride[0], p.stride[1]},
                                      {p.padding[0], p.padding[1]}, {p.dilation[0], p.dilation[1]}, p.ceil_mode);
    expect_values(out, want.values, {p.n, p.c, want.oh, want.ow}, 0, 0);
  }
}

TEST_P(PoolingTest, AvgPoolMatchesFloat64ReferenceOnAGrid) {
  for (const PoolCase& p : pool_grid()) {
    if (p.dilation != Size2{1, 1}) continue;
    for (bool count_include_pad : {true, false}) {
      SCOPED_TRACE(describe(p) + (count_include_pad ? " counting the padding" : ""));
      const Tensor x = Tensor::randn({p.n, p.c, p.h, p.w}, device());
      const Pooled want = pool_reference(p, to_double(x), false, count_include_pad);
      const Tensor out = nn::avg_pool2d(x, {p.kernel[0], p.kernel[1]}, {p.stride[0], p.stride[1]},
                                        {p.padding[0], p.padding[1]}, p.ceil_mode, count_include_pad);
      expect_values(out, want.values, {p.n, p.c, want.oh, want.ow}, 1e-5, 1e-6);
    }
  }
}

TEST_P(PoolingTest, AdaptiveAvgPoolAveragesPyTorchsWindows) {
  const Tensor x = Tensor::randn({2, 3, 7, 5}, device());
  const std::vector<double> v = to_double(x);
  for (const Size2& size : {Size2{3, 2}, Size2{1, 1}, Size2{7, 5}, Size2{9, 4}}) {
    std::vector<double> want;
    for (int64_t q = 0; q < 6; ++q)
      for (int64_t y = 0; y < size[0]; ++y)
        for (int64_t z = 0; z < size[1]; ++z) {
          const int64_t h0 = y * 7 / size[0], h1 = ((y + 1) * 7 + size[0] - 1) / size[0];
          const int64_t w0 = z * 5 / size[1], w1 = ((z + 1) * 5 + size[1] - 1) / size[1];
          double total = 0;
          for (int64_t a = h0; a < h1; ++a)
            for (int64_t b = w0; b < w1; ++b) total += v[(q * 7 + a) * 5 + b];
          want.push_back(total / static_cast<double>((h1 - h0) * (w1 - w0)));
        }
    expect_values(nn::adaptive_avg_pool2d(x, {size[0], size[1]}), want, {2, 3, size[0], size[1]}, 1e-5, 1e-6);
  }
  expect_values(nn::adaptive_avg_pool2d(x, 1), to_double(mean(x, {2, 3}, true)), {2, 3, 1, 1}, 1e-5, 1e-6);
}

TEST_P(PoolingTest, MaxPoolGradientGoesToTheFirstMaximum) {
  // Overlapping 2 x 2 windows, stride 1, over equal values: each window's gradient goes to its top-left element.
  const Tensor x = Tensor::ones({1, 1, 3, 3}, device()).set_requires_grad();
  const Tensor out = nn::max_pool2d(x, 2, 1);
  out.backward(Tensor::from_vector({1, 2, 3, 4}, {1, 1, 2, 2}, device()));
  expect_values(x.grad(), {1, 2, 0, 3, 4, 0, 0, 0, 0}, {1, 1, 3, 3}, 0, 0);
  // A window of only padding and -inf keeps -inf, its gradient on its first input position.
  const float inf = std::numeric_limits<float>::infinity();
  const Tensor low = Tensor::from_vector({-inf, -inf, -inf, -inf}, {1, 1, 2, 2}, device()).set_requires_grad();
  nn::max_pool2d(low, 2, 2, 1).backward(Tensor::ones({1, 1, 2, 2}, device()));
  expect_values(low.grad(), {1, 1, 1, 1}, {1, 1, 2, 2}, 0, 0);
}

TEST_P(PoolingTest, GradientsMatchFiniteDifferences) {
  for (const PoolCase& p : {pool_grid()[1], pool_grid()[2], pool_grid()[4]}) {
    SCOPED_TRACE(describe(p));
    const Tensor x = distinct_values({p.n, p.c, p.h, p.w}, device(), 3).set_requires_grad();
    const nn::Size2d k{p.kernel[0], p.kernel[1]}, s{p.stride[0], p.stride[1]}, pad{p.padding[0], p.padding[1]};
    const nn::Size2d d{p.dilation[0], p.dilation[1]};
    testing::gradcheck([&](const std::vector<Tensor>& in) { return nn::max_pool2d(in[0], k, s, pad, d, p.ceil_mode); },
                       {x});
    if (p.dilation != Size2{1, 1}) continue;
    for (bool count_include_pad : {true, false}) {
      testing::gradcheck(
          [&](const std::vector<Tensor>& in) {
            return nn::avg_pool2d(in[0], k, s, pad, p.ceil_mode, count_include_pad);
          },
          {x});
    }
  }
  const Tensor x = Tensor::randn({2, 2, 7, 5}, device()).set_requires_grad();
  testing::gradcheck([](const std::vector<Tensor>& in) { return nn::adaptive_avg_pool2d(in[0], {3, 4}); }, {x});
}

TEST_P(PoolingTest, UnbatchedInputsAndLayers) {
  const Tensor x = Tensor::randn({3, 6, 6}, device());
  const Tensor batch = x.unsqueeze(0);
  nn::MaxPool2d max_layer(2);
  EXPECT_EQ(max_layer(x).shape(), (Shape{3, 3, 3}));
  testing::expect_close(max_layer(x), nn::max_pool2d(batch, 2).squeeze(0), 0, 0);
  nn::AvgPool2d avg_layer(3, {.stride = 1, .padding = 1, .count_include_pad = false});
  testing::expect_close(avg_layer(batch), nn::avg_pool2d(batch, 3, 1, 1, false, false), 0, 0);
  nn::AdaptiveAvgPool2d adaptive(2);
  testing::expect_close(adaptive(x), nn::adaptive_avg_pool2d(batch, 2).squeeze(0), 0, 0);
  EXPECT_TRUE(max_layer.parameters().empty());
  EXPECT_EQ(max_layer.extra_repr(),
            "kernel_size=(2, 2), stride=(2, 2), padding=(0, 0), ceil_mode=false, dilation=(1, 1)");
  EXPECT_EQ(avg_layer.extra_repr(),
            "kernel_size=(3, 3), stride=(1, 1), padding=(1, 1), ceil_mode=false, count_include_pad=false");
  EXPECT_EQ(adaptive.extra_repr(), "output_size=(2, 2)");
  const auto copy = adaptive.clone();
  testing::expect_close(copy->forward(x), adaptive(x), 0, 0);
}

TEST_P(PoolingTest, ErrorsNameTheCause) {
  const Tensor x = Tensor::randn({1, 2, 5, 5}, device());
  EXPECT_ERROR(nn::max_pool2d(Tensor::randn({5, 5}, device()), 2), "nn::max_pool2d: input has shape [5, 5]");
  EXPECT_ERROR(nn::max_pool2d(x, 0), "kernel_size is [0, 0] but expected values >= 1");
  EXPECT_ERROR(nn::max_pool2d(x, 2, 0), "stride is [0, 0]");
  EXPECT_ERROR(nn::max_pool2d(x, 2, 2, 2), "padding [2, 2] is more than half of kernel_size [2, 2]");
  EXPECT_ERROR(nn::max_pool2d(x, 6), "the padded input has 5 rows but the kernel spans 6");
  EXPECT_ERROR(nn::max_pool2d(x, 3, {}, 0, 3), "the padded input has 5 rows but the dilated kernel spans 7");
  EXPECT_ERROR(nn::max_pool2d(x, {}), "kernel_size is not given");
  EXPECT_ERROR(nn::avg_pool2d(x.to(DType::BFloat16), 2), "expected float32");
  EXPECT_ERROR(nn::avg_pool2d(x, 2, 2, 3), "more than half");
  EXPECT_ERROR(nn::adaptive_avg_pool2d(x, {0, 2}), "output_size is [0, 2]");
  EXPECT_ERROR(nn::adaptive_avg_pool2d(Tensor::randn({1, 1, 0, 3}, device()), 2), "has no rows or no columns");
  EXPECT_ERROR(avg_pooling2d(x, {.kernel = {2, 2}, .stride = {2, 2}, .dilation = {2, 1}}), "average pooling has none");
  nn::MaxPool2d layer(2);
  EXPECT_ERROR(layer(Tensor::randn({2}, device())), "nn::MaxPool2d: input has shape [2]");
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(PoolingTest);

}  // namespace
}  // namespace tandem
