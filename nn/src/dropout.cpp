#include "tandem/nn/dropout.h"

#include "image_batch.h"
#include "tandem/core/ops.h"

namespace tandem::nn {

void detail::check_dropout_p(const char* caller, double p) {
  TANDEM_CHECK(p >= 0.0 && p < 1.0, caller, ": p is ", p, " but expected a probability in [0, 1)");
}

namespace {

// input * mask / (1 - p), with a mask of mask_shape (broadcast against the input) that is 1 with probability 1 - p.
// Note [Dropout masks] in dropout.h. An element of the mask is kept when its uniform value u in [0, 1) has u >= p,
// which happens with probability 1 - p.
Tensor apply_dropout_mask(const Tensor& input, const Shape& mask_shape, double p) {
  const Tensor kept = Tensor::rand(mask_shape, input.device()) >= static_cast<float>(p);
  return input * (kept * static_cast<float>(1.0 / (1.0 - p)));
}

// dropout2d under the name `caller`.
Tensor channel_dropout(const char* caller, const Tensor& input, double p, bool training) {
  detail::check_dropout_p(caller, p);
  return detail::on_image_batch(caller, input, [&](const Tensor& batch) {
    if (!training || p == 0.0) return batch;
    return apply_dropout_mask(batch, {batch.size(0), batch.size(1), 1, 1}, p);
  });
}

}  // namespace

Tensor dropout(const Tensor& input, double p, bool training) {
  TANDEM_CHECK(input.defined(), "nn::dropout: the input is undefined");
  detail::check_dropout_p("nn::dropout", p);
  if (!training || p == 0.0) return input;
  return dropout_drawn_in_place(input, p);  // the mask apply_dropout_mask would draw, never stored
}

Tensor Dropout::forward(const Tensor& input) {
  TANDEM_CHECK(input.defined(), "nn::Dropout: the input is undefined");
  return dropout(input, p(), is_training());
}

Tensor dropout2d(const Tensor& input, double p, bool training) {
  return channel_dropout("nn::dropout2d", input, p, training);
}

Tensor Dropout2d::forward(const Tensor& input) { return channel_dropout("nn::Dropout2d", input, p(), is_training()); }

}  // namespace tandem::nn
