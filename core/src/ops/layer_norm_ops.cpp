// layer_norm: the normalization of the trailing dims as one op whose forward and backward are single backend calls
// (Backend::layer_norm_forward / layer_norm_backward), keeping only each row's mean and rstd for the backward.
#include <cmath>
#include <utility>

#include "raw_ops.h"
#include "tandem/core/autograd.h"
#include "tandem/core/error.h"
#include "tandem/core/ops.h"

namespace tandem {

using autograd::Function;

namespace {

constexpr const char* kLayerNorm = "layer_norm";

class LayerNorm final : public Function {
 public:
  LayerNorm(Shape normalized_shape, float eps)
      : normalized_shape_(std::move(normalized_shape)), cols_(numel_of(normalized_shape_)), eps_(eps) {}

  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    shape_ = in[0].shape();
    const backend::LayerNormCall call = call_of(raw::contiguous(in[0]), in[1], in[2]);
    const Tensor out = raw::allocate(shape_, DType::Float32, in[0].device(), false, kLayerNorm);
    const Tensor mean = raw::allocate({call.rows}, DType::Float32, in[0].device(), false, kLayerNorm);
    const Tensor rstd = raw::allocate({call.rows}, DType::Float32, in[0].device(), false, kLayerNorm);
    backend::for_device(out.device()).layer_norm_forward(call, out, mean, rstd);
    save_for_backward({call.x, call.weight, call.bias, mean, rstd});
    return {out};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    const std::vector<Tensor>& saved = saved_tensors();
    const backend::LayerNormCall call = call_of(saved[0], saved[1], saved[2]);
    const Device device = call.x.device();
    const auto gradient = [&](size_t input, const Shape& shape) {
      return needs_input_grad(input) ? raw::allocate(shape, DType::Float32, device, false, kLayerNorm) : Tensor();
    };
    std::vector<Tensor> result = {gradient(0, shape_), gradient(1, normalized_shape_), gradient(2, normalized_shape_)};
    backend::for_device(device).layer_norm_backward(call, raw::contiguous(grads[0]), saved[3], saved[4], result[0],
                                                    result[1], result[2]);
    return result;
  }

  std::string name() const override { return "LayerNormBackward"; }

 private:
  backend::LayerNormCall call_of(const Tensor& x, const Tensor& weight, const Tensor& bias) const {
    const auto contiguous_or_none = [](const Tensor& t) { return t.defined() ? raw::contiguous(t) : Tensor(); };
    return {x, contiguous_or_none(weight), contiguous_or_none(bias), x.numel() / cols_, cols_, eps_};
  }

  Shape normalized_shape_;
  int64_t cols_;  // the elements of normalized_shape_: input's trailing sizes, so no overflow
  float eps_;
  Shape shape_;
};

void check_parameter(const Tensor& t, const char* what, const Tensor& input, const Shape& normalized_shape) {
  if (!t.defined()) return;
  raw::check_same_device(kLayerNorm, input, t);
  raw::check_float32(kLayerNorm, {input, t});
  TANDEM_CHECK(t.shape() == normalized_shape, kLayerNorm, ": ", what, " has shape ", to_string(t.shape()),
               " but expected normalized_shape ", to_string(normalized_shape));
}

}  // namespace

Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight, const Tensor& bias,
                  double eps) {
  raw::check_defined(kLayerNorm, input);
  raw::check_float32(kLayerNorm, {input});
  TANDEM_CHECK(!normalized_shape.empty(), kLayerNorm, ": normalized_shape is empty but expected at least one size");
  for (int64_t size : normalized_shape)
    TANDEM_CHECK(size >= 1, kLayerNorm, ": normalized_shape is ", to_string(normalized_shape),
                 " but expected positive sizes");
  const auto k = static_cast<int64_t>(normalized_shape.size());
  const Shape& shape = input.shape();
  TANDEM_CHECK(input.dim() >= k && Shape(shape.end() - k, shape.end()) == normalized_shape, kLayerNorm, ": input has shape ",
               to_string(shape), " but expected [..., ", to_string(normalized_shape).substr(1),
               " (normalized_shape = ", to_string(normalized_shape), ")");
  check_parameter(weight, "weight", input, normalized_shape);
  check_parameter(bias, "bias", input, normalized_shape);
  TANDEM_CHECK(std::isfinite(eps) && eps >= 0.0, kLayerNorm, ": eps is ", eps, " but expected a non-negative number");
  return autograd::apply_one(std::make_shared<LayerNorm>(normalized_shape, static_cast<float>(eps)),
                             {input, weight, bias});
}

}  // namespace tandem
