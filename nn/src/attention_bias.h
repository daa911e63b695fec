#pragma once
// The additive score biases that attention masks become (nn::scaled_dot_product_attention, nn::MultiheadAttention):
// 0 where a query may see a key, -inf where it may not, made on the device.

#include <cstdint>

#include "tandem/core/tensor.h"

namespace tandem::nn::detail {

// [queries, keys]: -inf where the key comes after the query's position (is_causal, aligned at the top left).
Tensor causal_bias(int64_t queries, int64_t keys, Device device);
// A mask as a bias: an int64 (boolean) mask as 0 and -inf, where nonzero means "takes part" (scaled_dot_product_
// attention's convention) or, with nonzero_left_out, "left out" (MultiheadAttention's); a float32 mask as it is.
// Errors (naming `op` and `what`): another dtype.
Tensor mask_bias(const Tensor& mask, bool nonzero_left_out, const char* op, const char* what);

}  // namespace tandem::nn::detail
