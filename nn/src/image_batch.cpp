#include "image_batch.h"

#include "tandem/core/error.h"
#include "tandem/core/shape.h"

namespace tandem::nn::detail {

Tensor on_image_batch(const char* caller, const Tensor& input, const std::function<Tensor(const Tensor&)>& op) {
  TANDEM_CHECK(input.defined(), caller, ": the input is undefined");
  TANDEM_CHECK(input.dim() == 3 || input.dim() == 4, caller, ": input has shape ", to_string(input.shape()),
               " but expected [N, C, H, W] or unbatched [C, H, W]");
  return input.dim() == 4 ? op(input) : op(input.unsqueeze(0)).squeeze(0);
}

Size2 given(const char* caller, const char* what, const Size2d& size) {
  TANDEM_CHECK(size.given(), caller, ": ", what, " is not given");
  return size.value();
}

std::string pair_text(const Size2d& size) {
  std::string text = "(";
  text += std::to_string(size.height());
  text += ", ";
  text += std::to_string(size.width());
  return text + ")";
}

}  // namespace tandem::nn::detail
