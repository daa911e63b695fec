#include "tandem/nn/conv.h"

#include "fan_in_uniform.h"
#include "image_batch.h"
#include "tandem/core/error.h"
#include "tandem/core/image_ops.h"
#include "tandem/core/shape.h"

namespace tandem::nn {
namespace {

// The geometry of convolution2d for `options` and a kernel of `kernel` {kH, kW} (Note [Padding "same"]).
Conv2dGeometry geometry_of(const char* caller, const Conv2dOptions& options, const Size2& kernel) {
  Conv2dGeometry geometry{.stride = detail::given(caller, "stride", options.stride),
                          .dilation = detail::given(caller, "dilation", options.dilation),
                          .groups = options.groups};
  const std::string& mode = options.padding.mode();
  if (mode.empty()) {
    geometry.padding_begin = geometry.padding_end = detail::given(caller, "padding", options.padding.sizes());
  } else if (mode == "same") {
    // Note [Padding "same"]: PyTorch's rule. Each axis gets dilation * (kernel - 1) zeros, so that a stride-1
    // output keeps the input's size: half of them (rounded down) before the input, the rest after it, so an even
    // kernel has one more zero row below and one more zero column right of the input. Strided convolutions are
    // refused, as in PyTorch, since no padding keeps their size.
    TANDEM_CHECK(geometry.stride == Size2({1, 1}), caller, ": padding \"same\" needs stride 1, got stride ",
                 detail::pair_text(options.stride));
    for (int d = 0; d < 2; ++d) {
      const int64_t total = geometry.dilation[d] * (kernel[d] - 1);
      geometry.padding_begin[d] = total / 2;
      geometry.padding_end[d] = total - total / 2;
    }
  } else {
    TANDEM_CHECK(mode == "valid", caller, ": padding is \"", excerpt(mode),
                 "\" but expected \"same\", \"valid\" or sizes");
  }
  return geometry;
}

Tensor convolve(const char* caller, const Tensor& input, const Tensor& weight, const Tensor& bias,
                const Conv2dOptions& options, std::optional<Precision> precision) {
  TANDEM_CHECK(weight.defined(), caller, ": weight is undefined");
  const Size2 kernel = weight.dim() == 4 ? Size2{weight.size(2), weight.size(3)} : Size2{1, 1};
  const Conv2dGeometry geometry = geometry_of(caller, options, kernel);
  return detail::on_image_batch(
      caller, input, [&](const Tensor& batch) { return convolution2d(batch, weight, bias, geometry, precision); });
}

}  // namespace

Tensor conv2d(const Tensor& input, const Tensor& weight, const Tensor& bias, const Conv2dOptions& options) {
  return convolve("nn::conv2d", input, weight, bias, options, std::nullopt);
}

Conv2d::Conv2d(int64_t in_channels, int64_t out_channels, Size2d kernel_size, Conv2dOptions options, Device device)
    : in_channels_(in_channels), out_channels_(out_channels), kernel_size_(kernel_size), options_(options) {
  constexpr const char* kLayer = "nn::Conv2d";
  const Size2 kernel = detail::given(kLayer, "kernel_size", kernel_size);
  TANDEM_CHECK(in_channels > 0 && out_channels > 0, kLayer, ": in_channels and out_channels must be positive, got ",
               in_channels, " and ", out_channels);
  TANDEM_CHECK(kernel[0] > 0 && kernel[1] > 0, kLayer, ": kernel_size must be positive, got ",
               detail::pair_text(kernel_size));
  TANDEM_CHECK(options.groups > 0, kLayer, ": groups must be positive, got ", options.groups);
  TANDEM_CHECK(in_channels % options.groups == 0 && out_channels % options.groups == 0, kLayer, ": in_channels (",
               in_channels, ") and out_channels (", out_channels, ") must be divisible by groups (", options.groups,
               ")");
  geometry_of(kLayer, options, kernel);  // refuses a bad padding mode and "same" with a stride now, as PyTorch
  const int64_t fan_in = in_channels / options.groups * kernel[0] * kernel[1];
  weight = detail::fan_in_uniform({out_channels, in_channels / options.groups, kernel[0], kernel[1]}, fan_in, device);
  register_parameter("weight", weight);
  if (options.bias) {
    bias = detail::fan_in_uniform({out_channels}, fan_in, device);
    register_parameter("bias", bias);
  }
}

Tensor Conv2d::forward(const Tensor& input) {
  return convolve("nn::Conv2d", input, weight, bias, options_, precision());
}

std::string Conv2d::extra_repr() const {
  std::string text = std::to_string(in_channels_) + ", " + std::to_string(out_channels_) +
                     ", kernel_size=" + detail::pair_text(kernel_size_) +
                     ", stride=" + detail::pair_text(options_.stride);
  const Conv2dPadding& padding = options_.padding;
  if (!padding.mode().empty()) {
    text += ", padding=" + padding.mode();
  } else if (padding.sizes().value() != Size2({0, 0})) {
    text += ", padding=" + detail::pair_text(padding.sizes());
  }
  if (options_.dilation.value() != Size2({1, 1})) text += ", dilation=" + detail::pair_text(options_.dilation);
  if (options_.groups != 1) text += ", groups=" + std::to_string(options_.groups);
  if (!bias.defined()) text += ", bias=false";
  return text;
}

}  // namespace tandem::nn
