#pragma once
// Convolution and pooling over batches of images [N, C, H, W] (float32, CPU and CUDA, differentiable), with every
// size given explicitly, per axis {height, width}. These are the ops; nn::conv2d, nn::max_pool2d, nn::avg_pool2d and
// nn::adaptive_avg_pool2d (tandem/nn/conv.h, pooling.h) give them PyTorch's signatures (one size for both axes,
// padding "same" / "valid", default strides, unbatched [C, H, W] inputs) and the layers build on those.
//
// Output sizes, per axis, for an input of size `in`:
//   convolution:  (in + padding_begin + padding_end - dilation * (kernel - 1) - 1) / stride + 1
//   pooling:      (in + 2 * padding - dilation * (kernel - 1) - 1) / stride + 1, rounded up instead of down with
//                 ceil_mode, less one where the last window would then start past in + padding (PyTorch's rule)
//   adaptive:     the output_size given; window o covers [floor(o * in / out), ceil((o + 1) * in / out)).

#include <array>
#include <cstdint>
#include <optional>

#include "tandem/core/precision.h"
#include "tandem/core/tensor.h"

namespace tandem {

using Size2 = std::array<int64_t, 2>;  // {height, width}

struct Conv2dGeometry {
  Size2 stride{1, 1};
  Size2 padding_begin{0, 0};  // zero rows above and zero columns left of the input
  Size2 padding_end{0, 0};    // below and right (differs from padding_begin for "same" with an even kernel)
  Size2 dilation{1, 1};
  int64_t groups = 1;
};

// The cross-correlation of torch.nn.functional.conv2d: input [N, C, H, W], weight [O, C / groups, kH, kW], bias [O]
// or undefined -> [N, O, OH, OW]; output channel o sees the input channels of its group (o / (O / groups)). Computed
// as im2col and one (grouped: batched) matrix product in `precision` (Note [Precision modes]; default_precision()
// when none is given, fixed when recorded, for the backward too), CPU Eigen or CUDA cuBLAS; Note [Convolution as one
// product] in core/src/ops/conv_ops.cpp. Differentiable in input, weight and bias.
// Errors: undefined input or weight; not float32; different devices; an input that is not 4-D or a weight that is
// not 4-D; groups < 1, or C or O not divisible by groups; C / groups other than the weight's dim 1; a bias that is
// not [O]; a stride or dilation < 1; a negative padding; an output size < 1 (the padded input smaller than the
// dilated kernel).
Tensor convolution2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Conv2dGeometry& geometry,
                     std::optional<Precision> precision = std::nullopt);

struct Pool2dGeometry {
  Size2 kernel{1, 1};
  Size2 stride{1, 1};
  Size2 padding{0, 0};   // on both sides: at most half the kernel (PyTorch's rule)
  Size2 dilation{1, 1};  // max pooling only
  bool ceil_mode = false;
};

// torch.nn.functional.max_pool2d: each window's largest value (padding left out; NaN counts as the largest), the
// gradient to the position it came from (of equal values, the first in row-major window order, as PyTorch).
// avg_pooling2d: each window's mean, dividing by the window's size with the padding when count_include_pad (PyTorch's
// default), else by the number of input positions in it; dilation must be 1. The gradient is shared by the window.
// Errors: undefined or not float32 input, not 4-D; a kernel, stride or dilation < 1; a padding < 0 or more than half
// the kernel; an output size < 1; for the average, a dilation other than 1.
Tensor max_pooling2d(const Tensor& input, const Pool2dGeometry& geometry);
Tensor avg_pooling2d(const Tensor& input, const Pool2dGeometry& geometry, bool count_include_pad = true);
// torch.nn.functional.adaptive_avg_pool2d to [N, C, output_size[0], output_size[1]].
// Errors: undefined or not float32 input, not 4-D; an output size < 1; an input of no rows or columns.
Tensor adaptive_avg_pooling2d(const Tensor& input, Size2 output_size);

}  // namespace tandem
