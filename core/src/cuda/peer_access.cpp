#include "cuda/peer_access.h"

#include <cuda_runtime.h>

#include <mutex>
#include <set>
#include <utility>

#include "tandem/core/cuda/context.h"

namespace tandem::cuda {
namespace {

// Lets `device` reach `peer`'s memory directly, once per ordered pair. The caller holds the mutex of `done`.
void enable_peer_access(int device, int peer, std::set<std::pair<int, int>>& done) {
  if (done.count({device, peer}) != 0) return;
  int can_access = 0;
  TANDEM_CUDA_CHECK(cudaDeviceCanAccessPeer(&can_access, device, peer));
  if (can_access != 0) {
    DeviceGuard guard(device);
    const cudaError_t status = cudaDeviceEnablePeerAccess(peer, 0);
    if (status == cudaErrorPeerAccessAlreadyEnabled) {
      (void)cudaGetLastError();  // enabled outside tandem: fine, and not left for later checks to report
    } else {
      TANDEM_CUDA_CHECK(status);
    }
  }
  done.insert({device, peer});
}

}  // namespace

void enable_peer_access_between(int a, int b) {
  if (a == b) return;
  static std::mutex mutex;
  static std::set<std::pair<int, int>> done;
  std::lock_guard lock(mutex);
  enable_peer_access(a, b, done);
  enable_peer_access(b, a, done);
}

// Note [Peer copies in a captured graph]: a stream that is being captured into a CUDA graph refuses
// cudaMemcpyPeerAsync (cudaErrorStreamCaptureUnsupported), but takes cudaMemcpyAsync with cudaMemcpyDefault, which
// finds both devices from the unified address space and becomes a copy node of the graph. Outside a capture the peer
// copy stays the call it always was.
void copy_peer_async(void* dst, int dst_device, const void* src, int src_device, size_t nbytes, cudaStream_t stream) {
  cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
  TANDEM_CUDA_CHECK(cudaStreamIsCapturing(stream, &capture));
  if (capture == cudaStreamCaptureStatusNone) {
    TANDEM_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device, src, src_device, nbytes, stream));
  } else {
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, stream));
  }
}

}  // namespace tandem::cuda
