// max_pooling2d, avg_pooling2d and adaptive_avg_pooling2d: one backend pass forward, one backward (Note [Sliding
// windows] in sliding_windows.h), over the N * C planes of the input.
#include "ops/image_geometry.h"
#include "raw_ops.h"
#include "tandem/core/autograd.h"
#include "tandem/core/error.h"
#include "tandem/core/image_ops.h"
#include "tandem/core/shape.h"

namespace tandem {

using autograd::Function;

namespace {

Shape output_shape(const Tensor& input, const backend::Pool2dWindows& windows) {
  return {input.size(0), input.size(1), windows.h.out, windows.w.out};
}

// The largest value of each window and, saved for the backward, its position in its plane.
class MaxPool final : public Function {
 public:
  explicit MaxPool(const backend::Pool2dWindows& windows) : windows_(windows) {}

  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    const Tensor input = raw::contiguous(in[0]);
    const Shape shape = output_shape(input, windows_);
    const Tensor out = raw::allocate(shape, DType::Float32, input.device(), false, "max_pooling2d");
    const Tensor indices = raw::allocate(shape, DType::Int64, input.device(), false, "max_pooling2d");
    if (out.numel() > 0) backend::for_device(input.device()).max_pool2d(input, windows_, out, indices);
    input_shape_ = input.shape();
    save_for_backward({indices});
    return {out};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    const Tensor& indices = saved_tensors()[0];
    const Tensor grad = raw::allocate(input_shape_, DType::Float32, indices.device(), false, "max_pooling2d");
    if (grad.numel() > 0) {
      backend::for_device(grad.device()).max_pool2d_backward(raw::contiguous(grads[0]), indices, windows_, grad);
    }
    return {grad};
  }

  std::string name() const override { return "MaxPool2dBackward"; }

 private:
  backend::Pool2dWindows windows_;
  Shape input_shape_;
};

// The mean of each window (fixed or adaptive ones, Pool2dWindows).
class AvgPool final : public Function {
 public:
  AvgPool(const backend::Pool2dWindows& windows, const char* op) : windows_(windows), op_(op) {}

  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    const Tensor input = raw::contiguous(in[0]);
    const Tensor out = raw::allocate(output_shape(input, windows_), DType::Float32, input.device(), false, op_);
    if (out.numel() > 0) backend::for_device(input.device()).avg_pool2d(input, windows_, out);
    input_shape_ = input.shape();
    device_ = input.device();
    return {out};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    const Tensor grad = raw::allocate(input_shape_, DType::Float32, device_, false, op_);
    if (grad.numel() > 0) {
      backend::for_device(device_).avg_pool2d_backward(raw::contiguous(grads[0]), windows_, grad);
    }
    return {grad};
  }

  std::string name() const override { return windows_.adaptive ? "AdaptiveAvgPool2dBackward" : "AvgPool2dBackward"; }

 private:
  backend::Pool2dWindows windows_;
  const char* op_;
  Shape input_shape_;
  Device device_;
};

// The windows of a max or average pooling of `input` with `geometry`, checked as image_ops.h says.
backend::Pool2dWindows fixed_windows(const char* op, const Tensor& input, const Pool2dGeometry& geometry) {
  detail::check_images(op, input);
  detail::check_at_least(op, "kernel_size", geometry.kernel, 1);
  detail::check_at_least(op, "stride", geometry.stride, 1);
  detail::check_at_least(op, "dilation", geometry.dilation, 1);
  detail::check_at_least(op, "padding", geometry.padding, 0);
  TANDEM_CHECK(geometry.padding[0] <= geometry.kernel[0] / 2 && geometry.padding[1] <= geometry.kernel[1] / 2, op,
               ": padding ", detail::to_string(geometry.padding), " is more than half of kernel_size ",
               detail::to_string(geometry.kernel));
  backend::Pool2dWindows windows;
  windows.planes = input.size(0) * input.size(1);
  backend::WindowAxis* axes[2] = {&windows.h, &windows.w};
  for (int d = 0; d < 2; ++d) {
    *axes[d] = {.in = input.size(2 + d),
                .kernel = geometry.kernel[d],
                .stride = geometry.stride[d],
                .padding = geometry.padding[d],
                .dilation = geometry.dilation[d]};
    axes[d]->out = detail::output_size(op, *axes[d], axes[d]->in + 2 * geometry.padding[d], geometry.ceil_mode,
                                       d == 0 ? "rows" : "columns");
  }
  return windows;
}

}  // namespace

Tensor max_pooling2d(const Tensor& input, const Pool2dGeometry& geometry) {
  return autograd::apply_one(std::make_shared<MaxPool>(fixed_windows("max_pooling2d", input, geometry)), {input});
}

Tensor avg_pooling2d(const Tensor& input, const Pool2dGeometry& geometry, bool count_include_pad) {
  constexpr const char* kOp = "avg_pooling2d";
  backend::Pool2dWindows windows = fixed_windows(kOp, input, geometry);
  TANDEM_CHECK(geometry.dilation[0] == 1 && geometry.dilation[1] == 1, kOp, ": dilation is ",
               detail::to_string(geometry.dilation), " but average pooling has none (expected [1, 1])");
  windows.count_include_pad = count_include_pad;
  return autograd::apply_one(std::make_shared<AvgPool>(windows, kOp), {input});
}

Tensor adaptive_avg_pooling2d(const Tensor& input, Size2 output_size) {
  constexpr const char* kOp = "adaptive_avg_pooling2d";
  detail::check_images(kOp, input);
  detail::check_at_least(kOp, "output_size", output_size, 1);
  TANDEM_CHECK(input.size(2) >= 1 && input.size(3) >= 1, kOp, ": input ", to_string(input.shape()),
               " has no rows or no columns to average");
  const backend::Pool2dWindows windows{.planes = input.size(0) * input.size(1),
                                       .h = {.in = input.size(2), .out = output_size[0]},
                                       .w = {.in = input.size(3), .out = output_size[1]},
                                       .adaptive = true};
  return autograd::apply_one(std::make_shared<AvgPool>(windows, kOp), {input});
}

}  // namespace tandem
