#pragma once
// The checks and output sizes that the convolution (conv_ops.cpp) and the poolings (pool_ops.cpp) share: one home
// for each rule of image_ops.h.

#include <string>

#include "sliding_windows.h"
#include "tandem/core/image_ops.h"

namespace tandem::detail {

// "[2, 3]" for {2, 3}.
std::string to_string(const Size2& size);

// Throws unless input is a defined float32 [N, C, H, W] tensor ("<op>: input has shape [3, 4] but expected
// [N, C, H, W]").
void check_images(const char* op, const Tensor& input);
// Throws unless both values of `size` are >= minimum ("<op>: stride is [0, 1] but expected values >= 1").
void check_at_least(const char* op, const char* what, const Size2& size, int64_t minimum);
// The number of windows along `axis` (its in, kernel, stride, padding and dilation set) over `padded` input
// positions (the input with the padding of both ends), rounded down, or up with ceil_mode less one where the last
// window would start past in + padding (PyTorch's pooling rule). Throws when that is < 1, naming the op and `what`
// ("rows" or "columns"): the padded input is shorter than the dilated kernel.
int64_t output_size(const char* op, const backend::WindowAxis& axis, int64_t padded, bool ceil_mode, const char* what);

}  // namespace tandem::detail
