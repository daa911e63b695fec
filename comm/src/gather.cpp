// comm::gather: concatenation of tensors from several devices onto one.

#include "checks.h"
#include "comm_backend.h"
#include "tandem/comm/comm.h"
#include "tandem/core/error.h"
#include "tandem/core/grad_mode.h"

namespace tandem::comm {
namespace {

// "[*, 5]": `shape` with `dim` left free.
std::string shape_except(const Shape& shape, int64_t dim) {
  std::string text = "[";
  for (size_t k = 0; k < shape.size(); ++k) {
    if (k > 0) text += ", ";
    text += static_cast<int64_t>(k) == dim ? "*" : std::to_string(shape[k]);
  }
  return text + "]";
}

}  // namespace

Tensor gather(const std::vector<Tensor>& tensors, int64_t dim, std::optional<Device> destination) {
  constexpr const char* fn = "comm::gather";
  TANDEM_CHECK(!tensors.empty(), fn, ": got no tensors");
  for (size_t i = 0; i < tensors.size(); ++i) detail::check_defined(tensors[i], fn, "tensor " + std::to_string(i));
  const Tensor& first = tensors[0];
  TANDEM_CHECK(first.dim() > 0, fn, ": cannot gather 0-dim tensors");
  const int64_t d = wrap_dim(dim, first.dim(), fn);
  Shape shape = first.shape();
  shape[d] = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const Tensor& t = tensors[i];
    TANDEM_CHECK(t.dim() == first.dim(), fn, ": tensor ", i, " has ", t.dim(), " dimensions but expected ",
                 first.dim());
    TANDEM_CHECK(t.dtype() == first.dtype(), fn, ": tensor ", i, " is ", t.dtype(), " but expected ", first.dtype(),
                 " (the dtype of tensor 0)");
    for (int64_t k = 0; k < t.dim(); ++k) {
      TANDEM_CHECK(k == d || t.size(k) == first.size(k), fn, ": tensor ", i, " has shape ", to_string(t.shape()),
                   " but expected ", shape_except(first.shape(), d));
    }
    shape[d] += t.size(d);
  }
  const Device target = destination.value_or(first.device());
  check_device_available(target, fn);
  NoGradGuard no_grad;

  // Each part is copied straight into its slice of the result (peer copies on CUDA), with no intermediate cat.
  Tensor result = Tensor::empty(shape, first.dtype(), target);
  std::vector<Tensor> parts;
  std::vector<Tensor> slices;
  std::vector<Device> participants = {target};
  int64_t offset = 0;
  for (const Tensor& t : tensors) {
    if (t.numel() > 0) {
      parts.push_back(t);
      slices.push_back(result.narrow(d, offset, t.size(d)));
      participants.push_back(t.device());
    }
    offset += t.size(d);
  }
  if (!parts.empty()) detail::backend_for(participants).copy(parts, slices);
  return result;
}

}  // namespace tandem::comm
