// nn::conv2d and nn::Conv2d (over convolution2d, tandem/core/image_ops.h): values against a float64 direct loop on a
// grid of shapes, strides, paddings ("same" with even kernels, "valid"), dilations and groups (depthwise included),
// unbatched inputs; gradient checks for input, weight and bias; the layer's parameters, initialization, clone,
// description; errors. Every test runs on the CPU and, where one is present, on a GPU.
#include <cmath>
#include <sstream>
#include <string>

#include "support/test_support.h"

namespace tandem {
namespace {

using testing::expect_values;
using testing::to_double;

struct ConvCase {
  int64_t n, c, h, w, o;
  Size2 kernel, stride, padding_begin, padding_end, dilation;
  int64_t groups;
  nn::Conv2dOptions options;  // the same geometry as nn::conv2d takes it
};

std::string describe(const ConvCase& k) {
  std::ostringstream os;
  os << "N=" << k.n << " C=" << k.c << " H=" << k.h << " W=" << k.w << " O=" << k.o << " k=" << k.kernel[0] << "x"
     << k.kernel[1] << " s=" << k.stride[0] << "," << k.stride[1] << " p=" << k.padding_begin[0] << ","
     << k.padding_begin[1] << "/" << k.padding_end[0] << "," << k.padding_end[1] << " d=" << k.dilation[0] << ","
     << k.dilation[1] << " g=" << k.groups;
  return os.str();
}

// The float64 cross-correlation, from its definition: out[n][o][y][x] = b[o] + sum over the channels c of o's group
// and the taps (i, j) of in[n][c][y * s - p + i * d][x * s - p + j * d] * w[o][c - group start][i][j], 0 outside.
std::vector<double> conv_reference(const ConvCase& k, const std::vector<double>& in, const std::vector<double>& w,
                                   const std::vector<double>& b, int64_t oh, int64_t ow) {
  const int64_t cg = k.c / k.groups, og = k.o / k.groups;
  std::vector<double> out(static_cast<size_t>(k.n * k.o * oh * ow));
  for (int64_t n = 0; n < k.n; ++n)
    for (int64_t o = 0; o < k.o; ++o)
      for (int64_t y = 0; y < oh; ++y)
        for (int64_t x = 0; x < ow; ++x) {
          double total = b.empty() ? 0.0 : b[o];
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t i = 0; i < k.kernel[0]; ++i)
              for (int64_t j = 0; j < k.kernel[1]; ++j) {
                const int64_t r = y * k.stride[0] - k.padding_begin[0] + i * k.dilation[0];
                const int64_t s = x * k.stride[1] - k.padding_begin[1] + j * k.dilation[1];
                if (r < 0 || r >= k.h || s < 0 || s >= k.w) continue;
                const int64_t c = o / og * cg + ci;
                total +=
                    in[((n * k.c + c) * k.h + r) * k.w + s] * w[((o * cg + ci) * k.kernel[0] + i) * k.kernel[1] + j];
              }
          out[((n * k.o + o) * oh + y) * ow + x] = total;
        }
  return out;
}

int64_t out_size(int64_t in, int64_t kernel, int64_t stride, int64_t begin, int64_t end, int64_t dilation) {
  return (in + begin + end - dilation * (kernel - 1) - 1) / stride + 1;
}

// "same": dilation * (kernel - 1) zeros per axis, the odd one after the input.
ConvCase same_case(int64_t n, int64_t c, int64_t h, int64_t w, int64_t o, Size2 kernel, Size2 dilation,
                   int64_t groups) {
  const Size2 total{dilation[0] * (kernel[0] - 1), dilation[1] * (kernel[1] - 1)};
  return {n,
          c,
          h,
          w,
          o,
          kernel,
          {1, 1},
          {total[0] / 2, total[1] / 2},
          {total[0] - total[0] / 2, total[1] - total[1] / 2},
          dilation,
          groups,
          {.padding = "same", .dilation = {dilation[0], dilation[1]}, .groups = groups}};
}

std::vector<ConvCase> conv_grid() {
  return {
      {2, 3, 7, 6, 4, {3, 3}, {1, 1}, {0, 0}, {0, 0}, {1, 1}, 1, {}},
      {1, 4, 8, 7, 6, {3, 2}, {2, 1}, {1, 0}, {1, 0}, {1, 1}, 2, {.stride = {2, 1}, .padding = {1, 0}, .groups = 2}},
      {2,
       4,
       9,
       9,
       4,
       {3, 3},
       {2, 2},
       {2, 2},
       {2, 2},
       {2, 1},
       4,
       {.stride = 2, .padding = 2, .dilation = {2, 1}, .groups = 4}},                           // depthwise
      {2, 3, 5, 6, 6, {3, 3}, {1, 1}, {1, 1}, {1, 1}, {1, 1}, 3, {.padding = 1, .groups = 3}},  // depthwise x2
      {1, 2, 5, 6, 3, {1, 1}, {1, 1}, {0, 0}, {0, 0}, {1, 1}, 1, {.padding = "valid"}},
      {1, 2, 6, 7, 5, {4, 4}, {3, 2}, {0, 1}, {0, 1}, {1, 1}, 1, {.stride = {3, 2}, .padding = {0, 1}}},
      same_case(2, 2, 6, 5, 2, {2, 2}, {1, 1}, 1),  // an even kernel: the extra zero row and column after
      same_case(1, 6, 5, 6, 3, {4, 3}, {1, 2}, 3),
  };
}

class Conv2dTest : public testing::EveryDevice {};

TEST_P(Conv2dTest, ForwardMatchesFloat64ReferenceOnAGrid) {
  manual_seed(11);
  for (const ConvCase& k : conv_grid()) {
    SCOPED_TRACE(describe(k));
    const Tensor input = Tensor::randn({k.n, k.c, k.h, k.w}, device());
    const Tensor weight = Tensor::randn({k.o, k.c / k.groups, k.kernel[0], k.kernel[1]}, device());
    const Tensor bias = Tensor::randn({k.o}, device());
    const int64_t oh = out_size(k.h, k.kernel[0], k.stride[0], k.padding_begin[0], k.padding_end[0], k.dilation[0]);
    const int64_t ow = out_size(k.w, k.kernel[1], k.stride[1], k.padding_begin[1], k.padding_end[1], k.dilation[1]);
    expect_values(nn::conv2d(input, weight, bias, k.options),
                  conv_reference(k, to_double(input), to_double(weight), to_double(bias), oh, ow), {k.n, k.o, oh, ow},
                  1e-5, 1e-5);
    expect_values(nn::conv2d(input, weight, {}, k.options),
                  conv_reference(k, to_double(input), to_double(weight), {}, oh, ow), {k.n, k.o, oh, ow}, 1e-5, 1e-5);
  }
}

TEST_P(Conv2dTest, SamePaddingKeepsTheSizeAndPadsTheEvenKernelAfter) {
  // A 2 x 2 kernel of ones over a 3 x 3 image: output (y, x) sums in[y..y+1][x..x+1], the last row and column
  // reading the zero after the input.
  const Tensor input = Tensor::from_vector({1, 2, 3, 4, 5, 6, 7, 8, 9}, {1, 1, 3, 3}, device());
  const Tensor out = nn::conv2d(input, Tensor::ones({1, 1, 2, 2}, device()), {}, {.padding = "same"});
  expect_values(out, {12, 16, 9, 24, 28, 15, 15, 17, 9}, {1, 1, 3, 3});
}

TEST_P(Conv2dTest, UnbatchedInputIsABatchOfOne) {
  manual_seed(5);
  const Tensor input = Tensor::randn({3, 6, 5}, device());
  const Tensor weight = Tensor::randn({4, 3, 3, 3}, device());
  const Tensor bias = Tensor::randn({4}, device());
  const Tensor out = nn::conv2d(input, weight, bias, {.padding = 1});
  EXPECT_EQ(out.shape(), (Shape{4, 6, 5}));
  testing::expect_close(out, nn::conv2d(input.unsqueeze(0), weight, bias, {.padding = 1}).squeeze(0), 0, 0);
}

TEST_P(Conv2dTest, GradientsOfInputWeightAndBias) {
  manual_seed(3);
  const Tensor input = Tensor::randn({2, 4, 5, 6}, device()).set_requires_grad();
  const Tensor weight = Tensor::randn({6, 2, 3, 2}, device()).set_requires_grad();
  const Tensor bias = Tensor::randn({6}, device()).set_requires_grad();
  const nn::Conv2dOptions strided{.stride = {2, 1}, .padding = {1, 2}, .dilation = {1, 2}, .groups = 2};
  testing::gradcheck([&](const std::vector<Tensor>& in) { return nn::conv2d(in[0], in[1], in[2], strided); },
                     {input, weight, bias});
  const nn::Conv2dOptions same{.padding = "same", .groups = 2};
  testing::gradcheck([&](const std::vector<Tensor>& in) { return nn::conv2d(in[0], in[1], in[2], same); },
                     {input, weight, bias});
  const Tensor depthwise = Tensor::randn({4, 1, 3, 3}, device()).set_requires_grad();
  testing::gradcheck(
      [&](const std::vector<Tensor>& in) { return nn::conv2d(in[0], in[1], {}, {.stride = 2, .groups = 4}); },
      {input, depthwise});
}

TEST_P(Conv2dTest, GradientsOnlyWhereAsked) {
  manual_seed(4);
  const Tensor input = Tensor::randn({1, 2, 4, 4}, device());
  const Tensor weight = Tensor::randn({3, 2, 3, 3}, device()).set_requires_grad();
  sum(nn::conv2d(input, weight)).backward();
  EXPECT_FALSE(input.grad().defined());
  ASSERT_TRUE(weight.grad().defined());
  // d sum / d w[o][c][i][j] = the sum of the input over the window positions that tap (i, j) reads.
  const std::vector<double> x = to_double(input);
  std::vector<double> expected;
  for (int64_t o = 0; o < 3; ++o)
    for (int64_t c = 0; c < 2; ++c)
      for (int64_t i = 0; i < 3; ++i)
        for (int64_t j = 0; j < 3; ++j) {
          double total = 0;
          for (int64_t y = 0; y < 2; ++y)
            for (int64_t z = 0; z < 2; ++z) total += x[(c * 4 + y + i) * 4 + z + j];
          expected.push_back(total);
        }
  expect_values(weight.grad(), expected, {3, 2, 3, 3}, 1e-5, 1e-5);
}

// Note [Precision modes]: the products follow default_precision() (an autocast scope) unless a precision is given,
// as the layer's set_precision does; bfloat16 rounds the operands, so its values differ from float32's.
TEST_P(Conv2dTest, ProductsRunInThePrecisionAskedFor) {
  manual_seed(8);
  nn::Conv2d conv(3, 4, 3, {.padding = 1}, device());
  const Tensor x = Tensor::randn({2, 3, 5, 5}, device());
  const Conv2dGeometry padded{.padding_begin = {1, 1}, .padding_end = {1, 1}};
  const Tensor bf16 = convolution2d(x, conv.weight, conv.bias, padded, Precision::BFloat16);
  {
    AutocastGuard autocast(DType::BFloat16);
    testing::expect_close(conv(x), bf16, 0, 0);
  }
  const Tensor fp32 = conv(x);
  EXPECT_GT(max_abs_diff(fp32, bf16), 0.0);
  EXPECT_LT(max_abs_diff(fp32, bf16), 0.05);
  conv.set_precision(Precision::BFloat16);
  testing::expect_close(conv(x), bf16, 0, 0);
  conv.set_precision(Precision::TF32);
  testing::expect_close(conv(x), convolution2d(x, conv.weight, conv.bias, padded, Precision::TF32), 0, 0);
}

TEST_P(Conv2dTest, LayerHasPyTorchsParametersAndInitialization) {
  manual_seed(9);
  nn::Conv2d conv(4, 6, {3, 2}, {.stride = 2, .padding = 1, .groups = 2}, device());
  const auto named = conv.named_parameters();
  ASSERT_EQ(named.size(), 2u);
  EXPECT_EQ(named[0].first, "weight");
  EXPECT_EQ(named[1].first, "bias");
  EXPECT_EQ(conv.weight.shape(), (Shape{6, 2, 3, 2}));
  EXPECT_EQ(conv.bias.shape(), (Shape{6}));
  const double bound = 1.0 / std::sqrt(2.0 * 3 * 2);  // fan_in = in / groups * kH * kW
  for (const Tensor& t : {conv.weight, conv.bias}) {
    double largest = 0;
    for (double v : to_double(t)) largest = std::max(largest, std::abs(v));
    EXPECT_LE(largest, bound);
    EXPECT_GT(largest, bound * 0.5);
  }
  manual_seed(9);
  nn::Conv2d on_cpu(4, 6, {3, 2}, {.stride = 2, .padding = 1, .groups = 2});
  testing::expect_close(conv.weight, on_cpu.weight, 0, 0);

  const Tensor x = Tensor::randn({2, 4, 7, 5}, device());
  testing::expect_close(conv(x), nn::conv2d(x, conv.weight, conv.bias, conv.options()), 0, 0);
  EXPECT_EQ(conv.extra_repr(), "4, 6, kernel_size=(3, 2), stride=(2, 2), padding=(1, 1), groups=2");

  nn::Conv2d plain(1, 2, 3, {.padding = "same", .bias = false}, device());
  EXPECT_FALSE(plain.bias.defined());
  EXPECT_EQ(plain.parameters().size(), 1u);
  EXPECT_EQ(plain.extra_repr(), "1, 2, kernel_size=(3, 3), stride=(1, 1), padding=same, bias=false");
}

TEST_P(Conv2dTest, LayerClonesAndMoves) {
  manual_seed(2);
  auto conv = std::make_shared<nn::Conv2d>(2, 3, 3, nn::Conv2dOptions{.padding = 1}, device());
  const Tensor x = Tensor::randn({1, 2, 4, 4}, device());
  const auto copy = std::dynamic_pointer_cast<nn::Conv2d>(conv->clone(Device::cpu(1)));
  ASSERT_NE(copy, nullptr);
  EXPECT_EQ(copy->weight.device(), Device::cpu(1));
  EXPECT_NE(copy->weight.data_ptr(), conv->weight.data_ptr());
  testing::expect_close(copy->forward(x.to(Device::cpu(1))), conv->forward(x), 1e-6, 1e-6);
  conv->to(Device::cpu(1));
  EXPECT_EQ(conv->bias.device(), Device::cpu(1));
}

TEST_P(Conv2dTest, ErrorsNameTheCause) {
  const Tensor x = Tensor::randn({1, 4, 5, 5}, device());
  const Tensor w = Tensor::randn({2, 4, 3, 3}, device());
  EXPECT_ERROR(nn::conv2d(Tensor::randn({4, 5}, device()), w), "expected [N, C, H, W] or unbatched [C, H, W]");
  EXPECT_ERROR(nn::conv2d(x, Tensor::randn({2, 4, 3}, device())), "weight has shape [2, 4, 3]");
  EXPECT_ERROR(nn::conv2d(x, Tensor::randn({2, 3, 3, 3}, device())), "has 4 channels, but weight [2, 3, 3, 3]");
  EXPECT_ERROR(nn::conv2d(x, Tensor::randn({2, 2, 3, 3}, device()), {}, {.groups = 3}),
               "channels are not divisible by groups = 3");
  EXPECT_ERROR(nn::conv2d(x, Tensor::randn({3, 2, 3, 3}, device()), {}, {.groups = 2}),
               "3 output channels are not divisible by groups = 2");
  EXPECT_ERROR(nn::conv2d(x, w, {}, {.groups = 0}), "groups is 0");
  EXPECT_ERROR(nn::conv2d(x, w, Tensor::randn({3}, device())), "bias has shape [3] but expected [2]");
  EXPECT_ERROR(nn::conv2d(x, w, {}, {.stride = 0}), "stride is [0, 0] but expected values >= 1");
  EXPECT_ERROR(nn::conv2d(x, w, {}, {.padding = -1}), "padding_begin is [-1, -1]");
  EXPECT_ERROR(nn::conv2d(x, w, {}, {.stride = 2, .padding = "same"}), "padding \"same\" needs stride 1");
  EXPECT_ERROR(nn::conv2d(x, w, {}, {.padding = "full"}), "padding is \"full\" but expected");
  EXPECT_ERROR(nn::conv2d(x, Tensor::randn({2, 4, 6, 3}, device())),
               "the padded input has 5 rows but the kernel spans 6");
  EXPECT_ERROR(nn::conv2d(x, w, {}, {.dilation = 3}), "the padded input has 5 rows but the dilated kernel spans 7");
  EXPECT_ERROR(nn::conv2d(x.to(DType::BFloat16), w), "expected float32");
  EXPECT_ERROR(nn::conv2d(x, w.to(Device::cpu(1))), "expected all tensors on one device");
  EXPECT_ERROR(nn::conv2d(x, Tensor()), "weight is undefined");
  EXPECT_ERROR(nn::Conv2d(4, 6, 3, {.groups = 4}), "must be divisible by groups (4)");
  EXPECT_ERROR(nn::Conv2d(0, 6, 3), "in_channels and out_channels must be positive");
  EXPECT_ERROR(nn::Conv2d(2, 2, 3, {.stride = 2, .padding = "same"}), "padding \"same\" needs stride 1");
  nn::Conv2d conv(4, 2, 3);
  EXPECT_ERROR(conv(Tensor::randn({1, 3, 5, 5})), "convolution2d: input [1, 3, 5, 5] has 3 channels");
  EXPECT_ERROR(conv(Tensor::randn({5, 5})), "nn::Conv2d: input has shape [5, 5]");
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(Conv2dTest);

}  // namespace
}  // namespace tandem
