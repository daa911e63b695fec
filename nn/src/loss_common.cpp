#include "loss_common.h"

#include <limits>
#include <ostream>

#include "tandem/core/error.h"
#include "tandem/core/ops.h"

namespace tandem::nn {

const char* reduction_name(Reduction reduction) {
  switch (reduction) {
    case Reduction::None:
      return "none";
    case Reduction::Mean:
      return "mean";
    case Reduction::Sum:
      return "sum";
  }
  TANDEM_FAIL("nn::reduction_name: got reduction ", static_cast<int>(reduction),
              " but expected Reduction::None, Mean or Sum");
}

std::ostream& operator<<(std::ostream& os, Reduction reduction) { return os << reduction_name(reduction); }

namespace detail {

void check_defined(const char* caller, const Tensor& input, const Tensor& target) {
  TANDEM_CHECK(input.defined() && target.defined(), caller, ": the ", input.defined() ? "target" : "input",
               " is undefined");
}

void check_float32(const char* caller, const Tensor& tensor, const char* what) {
  TANDEM_CHECK(tensor.dtype() == DType::Float32, caller, ": ", what, " is ", tensor.dtype(),
               " but expected float32 (convert with .to(DType::Float32))");
}

void check_on_input_device(const char* caller, const Tensor& input, const Tensor& tensor, const char* what) {
  TANDEM_CHECK(tensor.device() == input.device(), caller, ": ", what, " is on ", tensor.device(), " but input is on ",
               input.device());
}

void check_elementwise(const char* caller, const Tensor& input, const Tensor& target) {
  check_defined(caller, input, target);
  check_float32(caller, input, "input");
  check_float32(caller, target, "target");
  check_on_input_device(caller, input, target, "target");
  TANDEM_CHECK(input.shape() == target.shape(), caller, ": input has shape ", to_string(input.shape()),
               " but target has shape ", to_string(target.shape()), "; they must be equal");
}

void check_weight(const char* caller, const Tensor& input, const Tensor& weight, const char* what) {
  if (!weight.defined()) return;
  check_float32(caller, weight, what);
  check_on_input_device(caller, input, weight, what);
  TANDEM_CHECK(!weight.requires_grad(), caller, ": ", what,
               " requires grad but expected a constant of the loss (pass weight.detach())");
}

Tensor reduce(const char* caller, const Tensor& losses, Reduction reduction) {
  switch (reduction) {
    case Reduction::None:
      return losses;
    case Reduction::Mean:
      return mean(losses);
    case Reduction::Sum:
      return sum(losses);
  }
  TANDEM_FAIL(caller, ": got reduction ", static_cast<int>(reduction), " but expected Reduction::None, Mean or Sum");
}

Tensor reduce(const char* caller, const Tensor& losses, Reduction reduction, double divisor) {
  if (reduction != Reduction::Mean) return reduce(caller, losses, reduction);
  if (divisor == 0.0) return sum(losses) * std::numeric_limits<float>::quiet_NaN();
  return sum(losses) / static_cast<float>(divisor);
}

Tensor reduce(const char* caller, const Tensor& losses, Reduction reduction, const Tensor& divisor) {
  if (reduction != Reduction::Mean) return reduce(caller, losses, reduction);
  return sum(losses) / divisor;  // 0 / 0 = NaN when every element is ignored
}

}  // namespace detail
}  // namespace tandem::nn
