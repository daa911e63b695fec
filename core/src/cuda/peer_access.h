#pragma once
// Direct access between two GPUs, shared by core's cross-device copy and comm's overlapping peer copies. An internal
// header of the CUDA backends: comm includes it as "cuda/peer_access.h" through tandem_core_internal (Note [Core
// internals] in core/CMakeLists.txt).

#include <cuda_runtime.h>

#include <cstddef>

namespace tandem::cuda {

// Lets each of `a` and `b` reach the other's memory directly (NVLink or PCIe peer-to-peer) where the hardware allows
// it, once per ordered pair for the process; without it cudaMemcpyPeerAsync still works, staged through the host.
// Thread-safe. No-op when a == b. Errors: a CUDA error other than "already enabled".
void enable_peer_access_between(int a, int b);

// Enqueues a copy of `nbytes` from `src` on GPU `src_device` to `dst` on GPU `dst_device` on `stream` (Note [Peer
// copies in a captured graph]). Errors: the CUDA error of the copy.
void copy_peer_async(void* dst, int dst_device, const void* src, int src_device, size_t nbytes, cudaStream_t stream);

}  // namespace tandem::cuda
