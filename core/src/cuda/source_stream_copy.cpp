// Copies on the source's compute stream (Note [Copies on the source stream] in tandem/core/source_stream_copy.h).

#include "source_stream_copy.h"

#include <cuda_runtime.h>

#include "cuda/peer_access.h"
#include "tandem/core/cuda/context.h"

namespace tandem::detail {

void cuda_copy_on_source_stream(const Tensor& src, const Tensor& dst) {
  const int device = src.device().index();
  const size_t nbytes = static_cast<size_t>(src.numel()) * element_size(src.dtype());
  if (nbytes == 0) return;
  cuda::enable_peer_access_between(device, dst.device().index());  // once per pair; a set lookup after that
  cuda::DeviceGuard guard(device);
  // cudaMemcpyDefault: both ends found from the unified address space, also inside a capture (Note [Peer copies in
  // a captured graph] in cuda/peer_access.cpp).
  TANDEM_CUDA_CHECK(
      cudaMemcpyAsync(dst.mutable_data_ptr(), src.data_ptr(), nbytes, cudaMemcpyDefault, cuda::compute_stream(device)));
}

void cuda_order_after_source(const Tensor& src, const Tensor& dst) {
  const int from = src.device().index();
  cuda::stream_wait(cuda::compute_stream(dst.device().index()), cuda::compute_stream(from), from);
}

}  // namespace tandem::detail
