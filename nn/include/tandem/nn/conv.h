#pragma once
// Convolution: torch.nn.functional.conv2d and torch.nn.Conv2d, with PyTorch's arguments, parameter names, layouts
// and initialization, over convolution2d (tandem/core/image_ops.h).
//
//   nn::Conv2d conv(3, 64, 3, {.padding = "same", .bias = false});
//   Tensor y = conv.forward(x);                                        // x [N, 3, H, W] -> [N, 64, H, W]
//   Tensor z = nn::conv2d(x, w, b, {.stride = 2, .padding = {1, 0}, .groups = 3});

#include <cstdint>
#include <string>
#include <string_view>

#include "tandem/nn/image_size.h"
#include "tandem/nn/module.h"

namespace tandem::nn {

// A convolution's padding: zeros on both sides of each axis (one value, or {height, width}), or a mode as PyTorch
// names them: "valid" (none) or "same" (the output keeps the input's size, for stride 1 only: dilation * (kernel - 1)
// zeros per axis, half of them before the input and the rest, one more for an even kernel, after it, as PyTorch).
class Conv2dPadding {
 public:
  Conv2dPadding(int64_t both) : sizes_(both) {}  // NOLINT(google-explicit-constructor)
  Conv2dPadding(int64_t height, int64_t width) : sizes_(height, width) {}
  template <size_t N>
  Conv2dPadding(const char (&mode)[N]) : Conv2dPadding(std::string_view(mode, N - 1)) {}  // NOLINT: "same"
  // "same" or "valid"; another text is kept and refused where the padding is used (naming the op).
  explicit Conv2dPadding(std::string_view mode) : mode_(mode) {}

  const std::string& mode() const { return mode_; }  // empty for explicit sizes
  const Size2d& sizes() const { return sizes_; }

 private:
  Size2d sizes_{0};
  std::string mode_;
};

struct Conv2dOptions {
  Size2d stride = 1;
  Conv2dPadding padding = 0;
  Size2d dilation = 1;
  int64_t groups = 1;
  bool bias = true;  // nn::Conv2d's: whether it has a bias (nn::conv2d takes the bias tensor instead)
};

// torch.nn.functional.conv2d: input [N, C, H, W] or unbatched [C, H, W], weight [O, C / groups, kH, kW], bias [O]
// or undefined -> [N, O, OH, OW] (or [O, OH, OW]); convolution2d with options' stride, padding, dilation and groups
// (options.bias is not read), the product in default_precision(). Differentiable in input, weight and bias.
// Errors: those of convolution2d; an input that is neither 3-D nor 4-D; a stride or dilation not given; a padding
// mode other than "same" and "valid"; "same" with a stride other than 1.
Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias = {}, const Conv2dOptions& options = {});

class Conv2d : public Cloneable<Conv2d> {
 public:
  // weight [out_channels, in_channels / groups, kH, kW] and bias [out_channels] (none without options.bias), both
  // drawn as torch.nn.Conv2d does: kaiming_uniform(a = sqrt(5)) for the weight, U(-1/sqrt(fan_in), 1/sqrt(fan_in))
  // for the bias, fan_in = in_channels / groups * kH * kW (nn::Linear's rule with that fan_in), from the global
  // generator, the same values on every device.
  // Errors: in_channels, out_channels, groups or a kernel size < 1; channels not divisible by groups; a padding mode
  // other than "same" and "valid"; "same" with a stride other than 1.
  Conv2d(int64_t in_channels, int64_t out_channels, Size2d kernel_size, Conv2dOptions options = {},
         Device device = Device::cpu());

  // nn::conv2d(input, weight, bias, options) with the product in precision() (Module).
  Tensor forward(const Tensor& input) override;
  std::string extra_repr() const override;

  int64_t in_channels() const { return in_channels_; }
  int64_t out_channels() const { return out_channels_; }
  const Size2d& kernel_size() const { return kernel_size_; }
  const Conv2dOptions& options() const { return options_; }

  Tensor weight;
  Tensor bias;  // undefined (and not a parameter) without options.bias

 private:
  int64_t in_channels_;
  int64_t out_channels_;
  Size2d kernel_size_;
  Conv2dOptions options_;
};

}  // namespace tandem::nn
