// Copies between devices when at least one side is a GPU: host <-> GPU transfers, asynchronous copies from pinned host
// memory, and GPU <-> GPU peer copies.

#include <cuda_runtime.h>

#include "allocator.h"
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
    cuda::copy_peer_async(dst.mutable_data_ptr(), to, src.data_ptr(), from, nbytes, dst_stream);
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

// Note [Copies from pinned memory]: a copy from page-locked memory is enqueued on the destination's compute stream, so
// it is ordered before every later use of dst (its block comes from the stream-ordered caching allocator, Note
// [Stream-ordered reuse]), and the host does not wait for it: cudaMemcpyAsync from page-locked memory returns at once
// (from pageable memory it may not, which is why Backend::from_host waits). The source block is still read after the
// call returns, so its use is recorded (pinned_record_use): the pinned allocator does not hand the block out again
// before the copy has run (Note [Pinned block reuse] in pinned_allocator.cpp). Writing the source before the copy has
// run is the caller's business, as with PyTorch's non_blocking copies.
void cuda_copy_from_pinned(const Tensor& src, const Tensor& dst) {
  constexpr const char* fn = "backend::cuda_copy_from_pinned";
  TANDEM_CHECK(src.defined() && dst.defined(), fn, ": source and destination must be defined tensors");
  TANDEM_CHECK(src.storage()->is_pinned() && dst.device().is_cuda(), fn, ": copy from ", src.device(),
               src.storage()->is_pinned() ? " (pinned)" : " (not pinned)", " to ", dst.device(),
               " but expected pinned host memory to a CUDA device");
  TANDEM_CHECK(src.is_contiguous() && dst.is_contiguous(), fn, ": source (strides ", to_string(src.strides()),
               ") and destination (strides ", to_string(dst.strides()), ") must be contiguous");
  TANDEM_CHECK(src.numel() == dst.numel() && src.dtype() == dst.dtype(), fn, ": source and destination differ in ",
               "element count or type");
  const size_t nbytes = static_cast<size_t>(src.numel()) * element_size(src.dtype());
  if (nbytes == 0) return;
  const int device = dst.device().index();
  {
    cuda::DeviceGuard guard(device);
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst.mutable_data_ptr(), src.data_ptr(), nbytes, cudaMemcpyHostToDevice,
                                      cuda::compute_stream(device)));
  }
  alloc::pinned_record_use(src.storage()->data(), device);
}

}  // namespace tandem::backend
