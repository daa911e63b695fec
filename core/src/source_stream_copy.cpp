#include "tandem/core/source_stream_copy.h"

#include "source_stream_copy.h"
#include "tandem/core/error.h"

namespace tandem {

void copy_on_source_stream(const Tensor& src, const Tensor& dst) {
  constexpr const char* fn = "copy_on_source_stream";
  TANDEM_CHECK(src.defined() && dst.defined(), fn, ": source and destination must be defined tensors");
  TANDEM_CHECK(src.is_contiguous() && dst.is_contiguous(), fn, ": source (strides ", to_string(src.strides()),
               ") and destination (strides ", to_string(dst.strides()), ") must be contiguous");
  TANDEM_CHECK(src.dtype() == dst.dtype() && src.numel() == dst.numel(), fn, ": copies ", src.numel(), " elements of ",
               src.dtype(), " into ", dst.numel(), " of ", dst.dtype(), " but expected the same number and dtype");
  if (!src.device().is_cuda() || !dst.device().is_cuda() || src.device() == dst.device()) {
    Tensor(dst).copy_(src.reshape(dst.shape()));
    return;
  }
  detail::cuda_copy_on_source_stream(src, dst);
  detail::cuda_order_after_source(src, dst);
}

}  // namespace tandem
