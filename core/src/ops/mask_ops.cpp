// Masking ops: tril, triu and masked_fill. Each is one pointwise functor of x and a float32 0/1 mask made or
// converted on x's device (no host round trip, so they can be captured in a CUDA graph); the gradient is the
// incoming gradient masked the same way.
#include "ops/raw_kernels.h"
#include "tandem/core/autograd.h"
#include "tandem/core/error.h"
#include "tandem/core/ops.h"

namespace tandem {

using autograd::apply_one;
using autograd::Function;
using backend::Pointwise;
using backend::PointwiseCall;

namespace {

// out = forward(x, mask), dx = backward(g, mask); the mask broadcasts to x's shape and carries no gradient.
struct MaskRule {
  const char* name;
  PointwiseCall forward;
  PointwiseCall backward;
};

class Masked final : public Function {
 public:
  Masked(const MaskRule& rule, Tensor mask) : rule_(rule), mask_(std::move(mask)) {}
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    return {raw::pointwise(rule_.forward, {in[0], mask_}, rule_.name)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    return {raw::pointwise(rule_.backward, {grads[0], mask_}, rule_.name)};
  }
  std::string name() const override { return std::string(rule_.name) + "Backward"; }

 private:
  MaskRule rule_;
  Tensor mask_;
};

// tril (lower) or triu of x's matrices: x where the [rows, cols] mask of Backend::triangle_mask is 1, else 0.
Tensor triangle(const char* name, const Tensor& x, int64_t diagonal, bool lower) {
  raw::check_defined(name, x);
  raw::check_float32(name, {x});
  TANDEM_CHECK(x.dim() >= 2, name, ": expected a tensor of at least 2 dims, got shape ", to_string(x.shape()));
  Tensor mask = Tensor::empty({x.size(-2), x.size(-1)}, x.device());
  if (mask.numel() > 0) backend::for_device(x.device()).triangle_mask(diagonal, lower, mask);
  return apply_one(std::make_shared<Masked>(MaskRule{name, {Pointwise::MaskKeep}, {Pointwise::MaskKeep}}, mask), {x});
}

// mask as the float32 0/1 mask that masked_fill's functor reads: float32 as it is, int64 converted on its device
// (a non-zero integer stays non-zero as a float).
Tensor float_mask(const Tensor& mask) {
  raw::check_defined("masked_fill", mask, "mask");
  TANDEM_CHECK(mask.dtype() == DType::Float32 || mask.dtype() == DType::Int64, "masked_fill: mask is ", mask.dtype(),
               " but expected float32 or int64 (0 keeps, non-zero fills)");
  return mask.dtype() == DType::Float32 ? mask.detach() : raw::convert(mask, DType::Float32);
}

}  // namespace

Tensor tril(const Tensor& x, int64_t diagonal) { return triangle("tril", x, diagonal, /*lower=*/true); }
Tensor triu(const Tensor& x, int64_t diagonal) { return triangle("triu", x, diagonal, /*lower=*/false); }

Tensor masked_fill(const Tensor& x, const Tensor& mask, float value) {
  raw::check_defined("masked_fill", x);
  raw::check_float32("masked_fill", {x});
  Tensor fill_where = float_mask(mask);
  TANDEM_CHECK(broadcast_shapes(x.shape(), mask.shape(), "masked_fill") == x.shape(), "masked_fill: mask of shape ",
               to_string(mask.shape()), " does not broadcast to the input's shape ", to_string(x.shape()));
  const MaskRule rule{"masked_fill", {Pointwise::MaskFill, value}, {Pointwise::MaskDrop}};
  return apply_one(std::make_shared<Masked>(rule, std::move(fill_where)), {x});
}

}  // namespace tandem
