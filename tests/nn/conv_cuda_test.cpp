// The CUDA convolution and pooling (im2col / col2im and the pooling kernels of core/src/cuda/image_kernels.cu, the
// products through cuBLAS) against the CPU backend on the same inputs: forward and every gradient, on a grid of
// shapes, strides, paddings, dilations and groups, in float32, TF32 and bfloat16 (each against the CPU in the same
// precision, whose operands are rounded the same way), the poolings bitwise; and a CUDA graph capture of a
// convolution's forward and backward. Skips without a GPU.
#include <algorithm>
#include <cmath>
#include <functional>
#include <sstream>
#include <string>

#include "support/test_support.h"

namespace tandem {
namespace {

using testing::expect_near_relative;
using testing::kGpu;

struct ConvShape {
  Shape input, weight;
  Conv2dGeometry geometry;
};

std::vector<ConvShape> cuda_grid() {
  return {
      {{4, 3, 9, 8}, {8, 3, 3, 3}, {}},
      {{2, 4, 11, 10}, {6, 2, 3, 2}, {.stride = {2, 1}, .padding_begin = {1, 0}, .padding_end = {1, 0}, .groups = 2}},
      {{3, 8, 12, 12}, {8, 1, 3, 3}, {.stride = {2, 2}, .padding_begin = {1, 1}, .padding_end = {1, 1}, .groups = 8}},
      {{2, 4, 10, 9}, {4, 4, 4, 2}, {.padding_begin = {1, 0}, .padding_end = {2, 1}, .dilation = {1, 2}}},
      {{1, 16, 7, 7}, {32, 16, 1, 1}, {}},
      {{2, 6, 13, 11},
       {9, 2, 5, 3},
       {.stride = {3, 2}, .padding_begin = {2, 1}, .padding_end = {2, 1}, .dilation = {2, 1}, .groups = 3}},
      {{64, 1, 8, 8}, {32, 1, 3, 3}, {.padding_begin = {1, 1}, .padding_end = {1, 1}}},  // the digits CNN's first
  };
}

std::string describe_shape(const ConvShape& c, Precision precision) {
  std::ostringstream os;
  os << "input " << to_string(c.input) << " weight " << to_string(c.weight) << " stride " << c.geometry.stride[0] << ","
     << c.geometry.stride[1] << " groups " << c.geometry.groups << " " << precision_name(precision);
  return os.str();
}

struct Gradients {
  Tensor out, input, weight, bias;
};

Gradients run(const ConvShape& c, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& g, Device device,
              Precision precision) {
  // detach(): to() the device a tensor is on returns that tensor, whose requires_grad must stay off for the next run.
  const Tensor xl = x.to(device).detach().set_requires_grad(), wl = w.to(device).detach().set_requires_grad();
  const Tensor bl = b.to(device).detach().set_requires_grad();
  const Tensor out = convolution2d(xl, wl, bl, c.geometry, precision);
  out.backward(g.to(device));
  return {out.detach(), xl.grad(), wl.grad(), bl.grad()};
}

TEST(Conv2dCudaTest, MatchesTheCpuOnAGridInEveryPrecision) {
  TANDEM_REQUIRE_GPUS(1);
  manual_seed(17);
  for (const ConvShape& c : cuda_grid()) {
    const Tensor x = Tensor::randn(c.input), w = Tensor::randn(c.weight), b = Tensor::randn({c.weight[0]});
    const Tensor out_shape = convolution2d(x, w, b, c.geometry);
    const Tensor g = Tensor::randn(out_shape.shape());
    for (const auto& [precision, tolerance] : {std::pair{Precision::Float32, 1e-5}, std::pair{Precision::TF32, 2e-3},
                                               std::pair{Precision::BFloat16, 2e-3}}) {
      const std::string what = describe_shape(c, precision);
      const Gradients want = run(c, x, w, b, g, Device::cpu(), precision);
      const Gradients got = run(c, x, w, b, g, kGpu, precision);
      expect_near_relative(got.out, want.out, tolerance, what + " forward");
      expect_near_relative(got.input, want.input, tolerance, what + " input gradient");
      expect_near_relative(got.weight, want.weight, tolerance, what + " weight gradient");
      expect_near_relative(got.bias, want.bias, tolerance, what + " bias gradient");
    }
  }
}

TEST(Conv2dCudaTest, AutocastRunsTheProductsInBFloat16) {
  TANDEM_REQUIRE_GPUS(1);
  manual_seed(3);
  nn::Conv2d conv(4, 8, 3, {.padding = "same"}, kGpu);
  const Tensor x = Tensor::randn({2, 4, 6, 6}, kGpu);
  Tensor autocast_out;
  {
    AutocastGuard autocast(DType::BFloat16);
    autocast_out = conv(x);
  }
  testing::expect_close(
      autocast_out,
      convolution2d(x, conv.weight, conv.bias, {.padding_begin = {1, 1}, .padding_end = {1, 1}}, Precision::BFloat16),
      0, 0);
  expect_near_relative(autocast_out, conv(x), 3e-2, "bf16 against fp32");
}

TEST(Conv2dCudaTest, ForwardAndBackwardReplayInACapturedGraph) {
  TANDEM_REQUIRE_GPUS(1);
  manual_seed(5);
  const ConvShape c = cuda_grid()[1];
  Tensor x = Tensor::randn(c.input, kGpu);  // given new values before the replay
  const Tensor w = Tensor::randn(c.weight, kGpu).set_requires_grad();
  const Tensor b = Tensor::randn({c.weight[0]}, kGpu).set_requires_grad();
  const auto step = [&] {
    const Tensor pooled = max_pooling2d(relu(convolution2d(x, w, b, c.geometry)), {.kernel = {2, 2}, .stride = {2, 2}});
    sum(adaptive_avg_pooling2d(pooled, {1, 1})).backward();
  };
  step();  // warms the allocator and every kernel up outside the capture
  autograd::zero_grad({w, b}, false);
  DeviceGraph graph;
  graph.begin_capture({kGpu});
  step();
  graph.end_capture();

  const Tensor fresh = Tensor::randn(c.input, kGpu);
  {
    NoGradGuard no_grad;
    x.copy_(fresh);
  }
  autograd::zero_grad({w, b}, false);
  graph.replay();
  const Tensor w_grad = w.grad().clone(), b_grad = b.grad().clone();

  const Tensor wl = w.detach().clone().set_requires_grad(), bl = b.detach().clone().set_requires_grad();
  const Tensor pooled =
      max_pooling2d(relu(convolution2d(fresh, wl, bl, c.geometry)), {.kernel = {2, 2}, .stride = {2, 2}});
  sum(adaptive_avg_pooling2d(pooled, {1, 1})).backward();
  testing::expect_close(w_grad, wl.grad(), 1e-6, 1e-6);
  testing::expect_close(b_grad, bl.grad(), 1e-6, 1e-6);
}

// The pooling kernels visit the windows in the CPU's order and sum the same terms in the same order: equal bits.
TEST(Pool2dCudaTest, MatchesTheCpuBitwise) {
  TANDEM_REQUIRE_GPUS(1);
  manual_seed(23);
  const Shape shape{3, 5, 13, 11};
  const Tensor x = Tensor::randn(shape);
  const std::vector<Pool2dGeometry> geometries = {
      {.kernel = {2, 2}, .stride = {2, 2}},
      {.kernel = {3, 2}, .stride = {2, 1}, .padding = {1, 1}},
      {.kernel = {3, 3}, .stride = {2, 3}, .padding = {1, 0}, .ceil_mode = true},
      {.kernel = {3, 2}, .stride = {1, 2}, .padding = {1, 1}, .dilation = {2, 3}},
  };
  const auto compare = [&](const std::function<Tensor(const Tensor&)>& pool, const std::string& what) {
    SCOPED_TRACE(what);
    const Tensor on_cpu = x.detach().clone().set_requires_grad(), on_gpu = x.to(kGpu).set_requires_grad();
    const Tensor want = pool(on_cpu), got = pool(on_gpu);
    const Tensor g = Tensor::randn(want.shape());
    want.backward(g);
    got.backward(g.to(kGpu));
    testing::expect_close(got, want, 0, 0);
    testing::expect_close(on_gpu.grad(), on_cpu.grad(), 0, 0);
  };
  for (const Pool2dGeometry& geometry : geometries) {
    compare([&](const Tensor& t) { return max_pooling2d(t, geometry); }, "max");
    if (geometry.dilation != Size2{1, 1}) continue;
    for (bool count_include_pad : {true, false}) {
      compare([&](const Tensor& t) { return avg_pooling2d(t, geometry, count_include_pad); }, "avg");
    }
  }
  for (const Size2& size : {Size2{1, 1}, Size2{4, 3}, Size2{13, 11}, Size2{20, 7}}) {
    compare([&](const Tensor& t) { return adaptive_avg_pooling2d(t, size); }, "adaptive");
  }
}

}  // namespace
}  // namespace tandem
