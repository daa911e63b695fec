// convolution2d: im2col into one (grouped: batched) matrix product, forward and both gradients.
//
// Note [Convolution as one product]: with G groups, input [N, C, H, W], weight [O, C / G, kH, kW] and L = OH * OW
// output positions per image, im2col writes cols = [C * kH * kW, N * L] (Backend::im2col): one row per input
// channel and kernel tap, one column per output position of every image, the batch merged into the columns (as
// Caffe's layout, but for all images at once). Its rows split into G blocks of K = C / G * kH * kW rows, in the
// order of the weight's [C / G, kH, kW], so that with W_g the weight of group g as a [O / G, K] matrix and cols_g its
// block [K, N * L],
//   forward          Y_g  = W_g cols_g                         [O / G, N * L]: together Y = [O, N, L]
//   input gradient   dC_g = W_g^T dY_g, then col2im            dY = the output gradient as [O, N, L]
//   weight gradient  dW_g = dY_g cols_g^T                      the sum over the batch is the product's own
//   bias gradient    the sums of dY's rows
// each one batched product over the G groups (uniform strides: cuBLAS's strided-batched GEMM on CUDA, Eigen per
// group on the CPU), whatever N is. Only Y and dY change layout: [O, N, L] <-> the images' [N, O, L], one copy each
// (the forward's adds the bias as it copies). The backward recomputes cols from the saved input rather than keeping
// kH * kW copies of it alive between the passes.
#include <utility>

#include "ops/image_geometry.h"
#include "ops/raw_kernels.h"
#include "raw_ops.h"
#include "tandem/core/autograd.h"
#include "tandem/core/error.h"
#include "tandem/core/image_ops.h"
#include "tandem/core/matmul_settings.h"
#include "tandem/core/shape.h"

namespace tandem {

using autograd::Function;

namespace {

constexpr const char* kConvolutionOp = "convolution2d";

// t's elements [d0, d1, d2] viewed with dims 0 and 1 swapped (a view; t contiguous).
Tensor swap_leading(const Tensor& t, int64_t d0, int64_t d1, int64_t d2) {
  return raw::alias(t, {d1, d0, d2}, {d2, d1 * d2, 1}, t.storage_offset());
}

class Convolution final : public Function {
 public:
  Convolution(const backend::Conv2dWindows& windows, int64_t groups, int64_t out_channels, Precision precision)
      : windows_(windows), groups_(groups), out_channels_(out_channels), precision_(precision) {}

  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    const Tensor input = raw::contiguous(in[0]);
    const Tensor weight = raw::contiguous(in[1]);
    const Tensor& bias = in[2];
    save_for_backward({input, weight});
    const int64_t n = windows_.batch, o = out_channels_, l = positions();
    const Tensor rows = product(grouped_weight(weight), grouped_cols(im2col(input)));  // [O, N, L]
    const Tensor images = swap_leading(rows, o, n, l);                                 // [N, O, L]
    const Tensor out =
        bias.defined()
            ? raw::pointwise({backend::Pointwise::Add},
                             {images, raw::alias(bias, {1, o, 1}, {0, bias.strides()[0], 0}, bias.storage_offset())},
                             kConvolutionOp)
            : raw::contiguous(images);
    return {raw::reshaped(out, {n, o, windows_.h.out, windows_.w.out})};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    const Tensor& input = saved_tensors()[0];
    const Tensor& weight = saved_tensors()[1];
    const int64_t n = windows_.batch, o = out_channels_, l = positions();
    const Tensor g = raw::contiguous(grads[0]);
    const Tensor g_rows = raw::contiguous(swap_leading(g, n, o, l));  // [O, N, L]
    const Tensor g_grouped = raw::reshaped(g_rows, {groups_, o / groups_, n * l});
    std::vector<Tensor> result(3);
    if (needs_input_grad(0)) {
      const Tensor cols_grad = product(transposed(grouped_weight(weight)), g_grouped);
      result[0] = raw::allocate(input.shape(), DType::Float32, input.device(), false, kConvolutionOp);
      if (input.numel() > 0) backend::for_device(input.device()).col2im(cols_grad, windows_, result[0]);
    }
    if (needs_input_grad(1)) {
      result[1] = raw::reshaped(product(g_grouped, transposed(grouped_cols(im2col(input)))), weight.shape());
    }
    if (needs_input_grad(2)) result[2] = raw::sum_dim(raw::reshaped(g_rows, {o, n * l}), 1, false);
    return result;
  }

  std::string name() const override { return "Convolution2dBackward"; }

 private:
  int64_t positions() const { return windows_.h.out * windows_.w.out; }
  int64_t taps() const { return windows_.channels / groups_ * windows_.h.kernel * windows_.w.kernel; }

  Tensor im2col(const Tensor& input) const {
    const Tensor cols =
        raw::allocate({windows_.channels * windows_.h.kernel * windows_.w.kernel, windows_.batch * positions()},
                      DType::Float32, input.device(), false, kConvolutionOp);
    if (cols.numel() > 0) backend::for_device(input.device()).im2col(input, windows_, cols);
    return cols;
  }
  Tensor grouped_weight(const Tensor& weight) const {
    return raw::reshaped(weight, {groups_, out_channels_ / groups_, taps()});
  }
  Tensor grouped_cols(const Tensor& cols) const {
    return raw::reshaped(cols, {groups_, taps(), windows_.batch * positions()});
  }
  // [G, a, b] as [G, b, a] (a view).
  static Tensor transposed(const Tensor& t) {
    return raw::alias(t, {t.size(0), t.size(2), t.size(1)}, {t.strides()[0], t.strides()[2], t.strides()[1]},
                      t.storage_offset());
  }
  Tensor product(const Tensor& a, const Tensor& b) const { return raw::gemm_batched(a, b, precision_); }

  backend::Conv2dWindows windows_;
  int64_t groups_;
  int64_t out_channels_;
  Precision precision_;
};

}  // namespace

Tensor convolution2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Conv2dGeometry& geometry,
                     std::optional<Precision> precision) {
  detail::check_images(kConvolutionOp, input);
  raw::check_defined(kConvolutionOp, weight, "weight");
  raw::check_float32(kConvolutionOp, {input, weight, bias});
  raw::check_same_device(kConvolutionOp, input, weight);
  TANDEM_CHECK(weight.dim() == 4, kConvolutionOp, ": weight has shape ", to_string(weight.shape()),
               " but expected [out_channels, in_channels / groups, kH, kW]");
  const int64_t groups = geometry.groups, channels = input.size(1), out_channels = weight.size(0);
  TANDEM_CHECK(groups >= 1, kConvolutionOp, ": groups is ", groups, " but expected a value >= 1");
  TANDEM_CHECK(channels % groups == 0, kConvolutionOp, ": the input's ", channels,
               " channels are not divisible by groups = ", groups);
  TANDEM_CHECK(out_channels % groups == 0, kConvolutionOp, ": the weight's ", out_channels,
               " output channels are not divisible by groups = ", groups);
  TANDEM_CHECK(weight.size(1) * groups == channels, kConvolutionOp, ": input ", to_string(input.shape()), " has ", channels,
               " channels, but weight ", to_string(weight.shape()), " with groups = ", groups, " expects ",
               weight.size(1) * groups);
  if (bias.defined()) {
    raw::check_same_device(kConvolutionOp, input, bias);
    TANDEM_CHECK(bias.dim() == 1 && bias.size(0) == out_channels, kConvolutionOp, ": bias has shape ", to_string(bias.shape()),
                 " but expected [", out_channels, "]");
  }
  detail::check_at_least(kConvolutionOp, "stride", geometry.stride, 1);
  detail::check_at_least(kConvolutionOp, "dilation", geometry.dilation, 1);
  detail::check_at_least(kConvolutionOp, "padding_begin", geometry.padding_begin, 0);
  detail::check_at_least(kConvolutionOp, "padding_end", geometry.padding_end, 0);
  backend::Conv2dWindows windows;
  windows.batch = input.size(0);
  windows.channels = channels;
  backend::WindowAxis* axes[2] = {&windows.h, &windows.w};
  for (int d = 0; d < 2; ++d) {
    const int64_t kernel = weight.size(2 + d);
    TANDEM_CHECK(kernel >= 1, kConvolutionOp, ": weight ", to_string(weight.shape()), " has a kernel of no ",
                 d == 0 ? "rows" : "columns");
    *axes[d] = {.in = input.size(2 + d),
                .kernel = kernel,
                .stride = geometry.stride[d],
                .padding = geometry.padding_begin[d],
                .dilation = geometry.dilation[d]};
    axes[d]->out = detail::output_size(kConvolutionOp, *axes[d], axes[d]->in + geometry.padding_begin[d] + geometry.padding_end[d],
                                       false, d == 0 ? "rows" : "columns");
  }
  const auto node =
      std::make_shared<Convolution>(windows, groups, out_channels, precision.value_or(default_precision()));
  return autograd::apply_one(node, {input, weight, bias});
}

}  // namespace tandem
