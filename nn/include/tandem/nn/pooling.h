#pragma once
// Pooling: torch.nn.functional.max_pool2d, avg_pool2d and adaptive_avg_pool2d, and their layers MaxPool2d,
// AvgPool2d and AdaptiveAvgPool2d, with PyTorch's arguments, over the ops of tandem/core/image_ops.h. Inputs are
// [N, C, H, W] or unbatched [C, H, W]; every size is one value or {height, width}; a stride left out (Size2d{}) is
// the kernel size.
//
//   Tensor y = nn::max_pool2d(x, 2);                   // 2 x 2 windows, stride 2
//   nn::AvgPool2d pool(3, {.stride = 1, .padding = 1, .count_include_pad = false});

#include <string>

#include "tandem/nn/image_size.h"
#include "tandem/nn/module.h"

namespace tandem::nn {

// max_pooling2d: each window's largest value (padding left out), the gradient to its first occurrence.
// Errors: those of max_pooling2d; an input that is neither 3-D nor 4-D; kernel_size, padding or dilation not given.
Tensor max_pool2d(const Tensor& input, Size2d kernel_size, Size2d stride = {}, Size2d padding = 0, Size2d dilation = 1,
                  bool ceil_mode = false);
// avg_pooling2d: each window's mean, the padding counted in its size when count_include_pad.
// Errors: those of avg_pooling2d; an input that is neither 3-D nor 4-D; kernel_size or padding not given.
Tensor avg_pool2d(const Tensor& input, Size2d kernel_size, Size2d stride = {}, Size2d padding = 0,
                  bool ceil_mode = false, bool count_include_pad = true);
// adaptive_avg_pooling2d to output_size. Errors: those of adaptive_avg_pooling2d; an input that is neither 3-D nor
// 4-D; output_size not given.
Tensor adaptive_avg_pool2d(const Tensor& input, Size2d output_size);

struct MaxPool2dOptions {
  Size2d stride{};  // not given: kernel_size
  Size2d padding = 0;
  Size2d dilation = 1;
  bool ceil_mode = false;
};

struct AvgPool2dOptions {
  Size2d stride{};  // not given: kernel_size
  Size2d padding = 0;
  bool ceil_mode = false;
  bool count_include_pad = true;
};

// What a pooling layer over fixed windows keeps: its kernel size and options (checked when it runs, as PyTorch).
template <typename Self, typename Options>
class FixedWindowPool2d : public Cloneable<Self> {
 public:
  explicit FixedWindowPool2d(Size2d kernel_size, Options options = {}) : kernel_size_(kernel_size), options_(options) {}
  const Size2d& kernel_size() const { return kernel_size_; }
  const Options& options() const { return options_; }

 private:
  Size2d kernel_size_;
  Options options_;
};

class MaxPool2d : public FixedWindowPool2d<MaxPool2d, MaxPool2dOptions> {
 public:
  using FixedWindowPool2d::FixedWindowPool2d;
  Tensor forward(const Tensor& input) override;  // max_pool2d with the layer's sizes
  std::string extra_repr() const override;
};

class AvgPool2d : public FixedWindowPool2d<AvgPool2d, AvgPool2dOptions> {
 public:
  using FixedWindowPool2d::FixedWindowPool2d;
  Tensor forward(const Tensor& input) override;  // avg_pool2d with the layer's sizes
  std::string extra_repr() const override;
};

class AdaptiveAvgPool2d : public Cloneable<AdaptiveAvgPool2d> {
 public:
  explicit AdaptiveAvgPool2d(Size2d output_size);
  Tensor forward(const Tensor& input) override;  // adaptive_avg_pool2d to output_size
  std::string extra_repr() const override;

 private:
  Size2d output_size_;
};

}  // namespace tandem::nn
