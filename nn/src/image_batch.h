#pragma once
// What the convolution and pooling functions of nn share (conv.cpp, pooling.cpp): unbatched inputs, given sizes and
// their text in a layer's extra_repr.

#include <functional>
#include <string>

#include "tandem/core/tensor.h"
#include "tandem/nn/image_size.h"

namespace tandem::nn::detail {

// op(input) for a batch [N, C, H, W]; for an unbatched [C, H, W] input, op on it as a batch of one, the batch dim
// removed from the result, as PyTorch. Errors (naming `caller`): an undefined input, or one neither 3-D nor 4-D.
Tensor on_image_batch(const char* caller, const Tensor& input, const std::function<Tensor(const Tensor&)>& op);
// size's {height, width}. Errors (naming `caller` and `what`): size not given.
Size2 given(const char* caller, const char* what, const Size2d& size);
// "(3, 3)", PyTorch's text of a pair.
std::string pair_text(const Size2d& size);

}  // namespace tandem::nn::detail
