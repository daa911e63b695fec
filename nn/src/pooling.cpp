#include "tandem/nn/pooling.h"

#include "image_batch.h"
#include "tandem/core/image_ops.h"

namespace tandem::nn {
namespace {

Pool2dGeometry geometry_of(const char* caller, const Size2d& kernel_size, const Size2d& stride, const Size2d& padding,
                           const Size2d& dilation, bool ceil_mode) {
  const Size2 kernel = detail::given(caller, "kernel_size", kernel_size);
  return {.kernel = kernel,
          .stride = stride.given() ? stride.value() : kernel,
          .padding = detail::given(caller, "padding", padding),
          .dilation = detail::given(caller, "dilation", dilation),
          .ceil_mode = ceil_mode};
}

std::string pool_repr(const Size2d& kernel_size, const Size2d& stride, const Size2d& padding, bool ceil_mode) {
  return "kernel_size=" + detail::pair_text(kernel_size) +
         ", stride=" + detail::pair_text(stride.given() ? stride : kernel_size) +
         ", padding=" + detail::pair_text(padding) + ", ceil_mode=" + (ceil_mode ? "true" : "false");
}

Tensor max_pool(const char* caller, const Tensor& input, const Size2d& kernel_size, const Size2d& stride,
                const Size2d& padding, const Size2d& dilation, bool ceil_mode) {
  const Pool2dGeometry geometry = geometry_of(caller, kernel_size, stride, padding, dilation, ceil_mode);
  return detail::on_image_batch(caller, input, [&](const Tensor& batch) { return max_pooling2d(batch, geometry); });
}

Tensor avg_pool(const char* caller, const Tensor& input, const Size2d& kernel_size, const Size2d& stride,
                const Size2d& padding, bool ceil_mode, bool count_include_pad) {
  const Pool2dGeometry geometry = geometry_of(caller, kernel_size, stride, padding, 1, ceil_mode);
  return detail::on_image_batch(caller, input,
                                [&](const Tensor& batch) { return avg_pooling2d(batch, geometry, count_include_pad); });
}

Tensor adaptive_avg_pool(const char* caller, const Tensor& input, const Size2d& output_size) {
  const Size2 size = detail::given(caller, "output_size", output_size);
  return detail::on_image_batch(caller, input,
                                [&](const Tensor& batch) { return adaptive_avg_pooling2d(batch, size); });
}

}  // namespace

Tensor max_pool2d(const Tensor& input, Size2d kernel_size, Size2d stride, Size2d padding, Size2d dilation,
                  bool ceil_mode) {
  return max_pool("nn::max_pool2d", input, kernel_size, stride, padding, dilation, ceil_mode);
}

Tensor avg_pool2d(const Tensor& input, Size2d kernel_size, Size2d stride, Size2d padding, bool ceil_mode,
                  bool count_include_pad) {
  return avg_pool("nn::avg_pool2d", input, kernel_size, stride, padding, ceil_mode, count_include_pad);
}

Tensor adaptive_avg_pool2d(const Tensor& input, Size2d output_size) {
  return adaptive_avg_pool("nn::adaptive_avg_pool2d", input, output_size);
}

Tensor MaxPool2d::forward(const Tensor& input) {
  return max_pool("nn::MaxPool2d", input, kernel_size(), options().stride, options().padding, options().dilation,
                  options().ceil_mode);
}

std::string MaxPool2d::extra_repr() const {
  return pool_repr(kernel_size(), options().stride, options().padding, options().ceil_mode) +
         ", dilation=" + detail::pair_text(options().dilation);
}

Tensor AvgPool2d::forward(const Tensor& input) {
  return avg_pool("nn::AvgPool2d", input, kernel_size(), options().stride, options().padding, options().ceil_mode,
                  options().count_include_pad);
}

std::string AvgPool2d::extra_repr() const {
  return pool_repr(kernel_size(), options().stride, options().padding, options().ceil_mode) +
         ", count_include_pad=" + (options().count_include_pad ? "true" : "false");
}

AdaptiveAvgPool2d::AdaptiveAvgPool2d(Size2d output_size) : output_size_(output_size) {}

Tensor AdaptiveAvgPool2d::forward(const Tensor& input) {
  return adaptive_avg_pool("nn::AdaptiveAvgPool2d", input, output_size_);
}

std::string AdaptiveAvgPool2d::extra_repr() const { return "output_size=" + detail::pair_text(output_size_); }

}  // namespace tandem::nn
