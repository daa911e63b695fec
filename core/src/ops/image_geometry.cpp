#include "ops/image_geometry.h"

#include "raw_ops.h"
#include "tandem/core/error.h"
#include "tandem/core/shape.h"

namespace tandem::detail {

std::string to_string(const Size2& size) { return tandem::to_string(Shape(size.begin(), size.end())); }

void check_images(const char* op, const Tensor& input) {
  raw::check_defined(op, input);
  TANDEM_CHECK(input.dim() == 4, op, ": input has shape ", tandem::to_string(input.shape()),
               " but expected [N, C, H, W]");
  raw::check_float32(op, {input});
}

void check_at_least(const char* op, const char* what, const Size2& size, int64_t minimum) {
  TANDEM_CHECK(size[0] >= minimum && size[1] >= minimum, op, ": ", what, " is ", to_string(size),
               " but expected values >= ", minimum);
}

int64_t output_size(const char* op, const backend::WindowAxis& axis, int64_t padded, bool ceil_mode, const char* what) {
  const int64_t span = axis.dilation * (axis.kernel - 1) + 1;
  TANDEM_CHECK(padded >= span, op, ": the padded input has ", padded, " ", what, " but the ",
               axis.dilation > 1 ? "dilated " : "", "kernel spans ", span);
  const int64_t room = padded - span;
  int64_t out = (ceil_mode ? (room + axis.stride - 1) / axis.stride : room / axis.stride) + 1;
  if (ceil_mode && (out - 1) * axis.stride >= axis.in + axis.padding) --out;
  return out;
}

}  // namespace tandem::detail
