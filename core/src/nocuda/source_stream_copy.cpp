// copy_on_source_stream without CUDA: no tensor is ever on a GPU, so these are never reached.

#include "source_stream_copy.h"

#include "tandem/core/error.h"

namespace tandem::detail {

void cuda_copy_on_source_stream(const Tensor&, const Tensor&) {
  TANDEM_FAIL("copy_on_source_stream: tandem was built without CUDA (configure with -DTANDEM_CUDA=ON)");
}

void cuda_order_after_source(const Tensor&, const Tensor&) {
  TANDEM_FAIL("copy_on_source_stream: tandem was built without CUDA (configure with -DTANDEM_CUDA=ON)");
}

}  // namespace tandem::detail
