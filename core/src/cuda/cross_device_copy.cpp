// Copies between devices when at least one side is a GPU: host <-> GPU transfers and GPU <-> GPU peer copies.

#include <cuda_runtime.h>

#include "backend.h"
#include "cuda/peer_access.h"
#include "tandem/core/cuda/context.h"

namespace tandem::backend {
namespace {

// Note [Cross-device copy ordering]: the copy runs on the destination's compute stream, after that stream has waited
// for the source's compute stream (the producers of src); then the source's compute stream waits for the copy, so
// that src is neither overwritten nor its block reused (Note [Stream-ordered reuse]) before the copy has read it.
// Both waits are events: the host never blocks. (comm's copies run on the communication streams instead: Note [Comm
// peer copy ordering] in comm/src/cuda/peer_copies.cpp.)
void copy_between_gpus(const Tensor& src, const Tensor& dst, size_t nbytes) {
  const int from = src.device().index();
  const int to = dst.device().index();
  cuda::enable_peer_access_between(from, to);
  const cudaStream_t src_stream = cuda::compute_stream(from);
  const cudaStream_t dst_stream = cuda::compute_stream(to);
  cuda::stream_wait(dst_stream, src_stream, from);
  {
    cuda::DeviceGuard guard(to);
    TANDEM_CUDA_CHECK(cudaMemcpyPeerAsync(dst.mutable_data_ptr(), to, src.data_ptr(), from, nbytes, dst_stream));
  }
  cuda::stream_wait(src_stream, dst_stream, to);
}

}  // namespace

void cuda_copy_across_devices(const Tensor& src, const Tensor& dst) {
  constexpr const char* fn = "backend::cuda_copy_across_devices";
  TANDEM_CHECK(src.defined() && dst.defined(), fn, ": source and destination must be defined tensors");
  TANDEM_CHECK(src.device().is_cuda() || dst.device().is_cuda(), fn, ": copy from ", src.device(), " to ",
               dst.device(), " but expected at least one CUDA device");
  TANDEM_CHECK(src.is_contiguous() && dst.is_contiguous(), fn, ": source (strides ", to_string(src.strides()),
               ") and destination (strides ", to_string(dst.strides()), ") must be contiguous");
  TANDEM_CHECK(src.numel() == dst.numel(), fn, ": source has ", src.numel(), " elements but destination has ",
               dst.numel());
  TANDEM_CHECK(src.dtype() == dst.dtype(), fn, ": source and destination element types differ");
  const size_t nbytes = static_cast<size_t>(src.numel()) * element_size(src.dtype());
  if (nbytes == 0) return;
  // Host transfers wait for the device before returning (Note [Host transfers] in cuda_backend.cpp).
  if (src.device().is_cpu()) {
    cuda().from_host(src.data_ptr(), dst);
  } else if (dst.device().is_cpu()) {
    cuda().to_host(src, dst.mutable_data_ptr());
  } else {
    copy_between_gpus(src, dst, nbytes);
  }
}

}  // namespace tandem::backend
