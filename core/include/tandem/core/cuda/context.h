#pragma once
// Per-device CUDA state shared by the CUDA backends (core ops, comm): the compute stream, the communication
// stream, the cuBLAS handle, an RAII device guard, and the error checks that turn CUDA/cuBLAS failures into
// tandem::Error. Only CUDA backend translation units include this header.

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <mutex>

#include "tandem/core/error.h"
#include "tandem/core/stream_marker.h"

namespace tandem::cuda {

// Note [Streams]: each device has one compute stream on which every op for that device is issued (whatever host
// thread issues it), and one communication stream for the communication that overlaps it (peer copies, the
// asynchronous all-reduce; synchronous collectives run on the compute streams). Both are non-blocking streams
// created on first use and kept for the life of the process. Work crosses streams and devices only through events.
cudaStream_t compute_stream(int device);
cudaStream_t comm_stream(int device);
cublasHandle_t cublas_handle(int device);  // bound to compute_stream(device)

// Makes `consumer` wait (on the device) for all work issued so far on `producer`; no host synchronization. Holds a
// CollectiveLaunchLock while it records and enqueues the wait.
void stream_wait(cudaStream_t consumer, cudaStream_t producer, int producer_device);

// Note [Launching collectives]: the kernels of one NCCL collective wait for one another on the devices, so once the
// first of them is launched it can only finish after the last one is launched too. Two things that another host
// thread could do between those launches would then hang the process:
//  - make a stream of a participating device that does not yet hold its collective kernel wait for an event
//    recorded after the kernel already launched on another participating device: a cycle between the devices, once
//    the remaining kernel is launched behind that wait (the joins of Note [Comm stream ordering] make such events
//    common);
//  - call cudaDeviceSynchronize or cudaFree on a participating device: that thread waits for the launched kernel
//    while holding driver locks that the remaining launches need.
// So the comm backend launches every collective while holding a CollectiveLaunchLock, and stream_wait and the
// caching allocator's release of memory to the driver hold one too: none of them can fall between two launches of
// one collective. It is one process-wide mutex, so collectives are also launched one at a time, which NCCL needs
// (one thread at a time per communicator, and every rank sees the collectives in the same order). Code holding it
// must not allocate or free device memory (the caching allocator takes it while holding its own lock).
class CollectiveLaunchLock {
 public:
  CollectiveLaunchLock();
  CollectiveLaunchLock(const CollectiveLaunchLock&) = delete;
  CollectiveLaunchLock& operator=(const CollectiveLaunchLock&) = delete;

 private:
  std::unique_lock<std::mutex> lock_;
};

// The event of a marker recorded on a CUDA device (Note [Stream markers]), valid while the marker lives. Errors: a
// marker that holds no event (recorded on a CPU device, or default-constructed).
cudaEvent_t marker_event(const StreamMarker& marker);

// Sets the current device, restoring the previous one when destroyed.
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_;
};

// Blocks the host until all work on the device's compute and comm streams is done.
void synchronize(int device);

[[noreturn]] void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line);
[[noreturn]] void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line);

}  // namespace tandem::cuda

#define TANDEM_CUDA_CHECK(expr)                                                          \
  do {                                                                                   \
    cudaError_t tandem_status_ = (expr);                                                 \
    if (tandem_status_ != cudaSuccess) [[unlikely]]                                      \
      ::tandem::cuda::throw_cuda_error(tandem_status_, #expr, __FILE__, __LINE__);       \
  } while (false)

#define TANDEM_CUBLAS_CHECK(expr)                                                        \
  do {                                                                                   \
    cublasStatus_t tandem_status_ = (expr);                                              \
    if (tandem_status_ != CUBLAS_STATUS_SUCCESS) [[unlikely]]                            \
      ::tandem::cuda::throw_cublas_error(tandem_status_, #expr, __FILE__, __LINE__);     \
  } while (false)

// Checks for an error from the last kernel launch.
#define TANDEM_CUDA_CHECK_LAUNCH() TANDEM_CUDA_CHECK(cudaGetLastError())
