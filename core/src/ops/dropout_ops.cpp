// dropout_drawn_in_place: dropout whose mask is drawn by the kernels that apply it (Backend::apply_dropout).
#include "raw_ops.h"
#include "tandem/core/autograd.h"
#include "tandem/core/error.h"
#include "tandem/core/ops.h"

namespace tandem {

namespace {

constexpr const char* kDropout = "dropout";

// Note [Dropout drawn in place]: element i of the mask is kept when value i of the draws reserved for the input's
// numel() elements passes the threshold of detail::DropoutMask (Note [Dropout thresholds] in draw_place.h), which is
// exactly Tensor::rand(shape) >= p over the same draws, so the mask is the one nn::dropout has always drawn. The
// forward applies it as it draws it, the backward draws it again from the same place: no uniform values, no
// comparison and no mask in memory, one read and one write of the tensor each way.
class DropoutDrawnInPlace final : public autograd::Function {
 public:
  explicit DropoutDrawnInPlace(double p) : p_(p) {}

  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    const Tensor x = raw::contiguous(in[0]);
    mask_ = detail::DropoutMask::of(p_, backend::reserve_draws(x.device(), static_cast<uint64_t>(x.numel()), kDropout));
    return {apply(x)};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override { return {apply(raw::contiguous(grads[0]))}; }

  std::string name() const override { return "DropoutBackward"; }

 private:
  Tensor apply(const Tensor& x) const {
    const Tensor out = raw::allocate(x.shape(), DType::Float32, x.device(), false, kDropout);
    if (x.numel() > 0) backend::for_device(x.device()).apply_dropout(x, mask_, out);
    return out;
  }

  double p_;
  detail::DropoutMask mask_;
};

}  // namespace

Tensor dropout_drawn_in_place(const Tensor& input, double p) {
  raw::check_defined(kDropout, input, "input");
  raw::check_float32(kDropout, {input});
  TANDEM_CHECK(p >= 0.0 && p < 1.0, kDropout, ": p is ", p, " but expected a probability in [0, 1)");
  return autograd::apply_one(std::make_shared<DropoutDrawnInPlace>(p), {input});
}

}  // namespace tandem
