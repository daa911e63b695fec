#pragma once
// Process-wide choices for matrix products. Each takes effect for the products issued after it changes, on every
// thread; read and written atomically.

#include "tandem/core/precision.h"

namespace tandem {

// Whether matrix products that are given no precision of their own run in TF32 (Note [Precision modes] in
// precision.h): on CUDA several times faster on large products, with 10-bit mantissa multiplies (sums stay float32);
// the CPU rounds the inputs the same way. Off by default, so that products are plain float32;
// TANDEM_ALLOW_TF32=1 in the environment turns it on from the start. A precision given to linear() or to a model
// (nn::Module::set_precision) wins over this switch.
bool allow_tf32();
void set_allow_tf32(bool allow);
// The precision of a product given none: the calling thread's autocast precision inside an AutocastGuard
// (autocast.h), else Precision::TF32 when allow_tf32(), else Precision::Float32.
Precision default_precision();

// Whether linear() takes its fused form (on by default; TANDEM_FUSED_LINEAR=0 in the environment turns it off from
// the start). Fused: on CUDA the bias is added in the epilogue of the forward product and the bias gradient comes
// out of the weight-gradient product (cuBLASLt); on every device the weight gradient is added straight into the
// weight's existing .grad (Note [Gradients written in place] in core/src/autograd/engine.cpp). Not fused: the bias
// is copied into the output before the product, the bias gradient is a reduction of its own, and the weight
// gradient is materialized and then added by the weight's accumulator. On the CPU both give the same values; on
// CUDA they agree to float rounding. The switch exists to compare the two.
bool fused_linear();
void set_fused_linear(bool fused);

// Whether nn::scaled_dot_product_attention takes the fused op (fused_attention in ops.h) where it applies (on by
// default; TANDEM_FUSED_ATTENTION=0 in the environment turns it off from the start). Off, every call takes the
// reference path of composed products and softmax, which stores the scores. The switch exists to compare the two.
bool fused_attention_enabled();
void set_fused_attention_enabled(bool enabled);

}  // namespace tandem
