#pragma once
// Per-device CUDA state shared by the CUDA backends (core ops, comm): the compute stream, the communication
// stream, the cuBLAS handle, an RAII device guard, and the error checks that turn CUDA/cuBLAS failures into
// tandem::Error. Only CUDA backend translation units include this header.

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <vector>

#include "tandem/core/cuda/collective_launch.h"
#include "tandem/core/error.h"
#include "tandem/core/stream_marker.h"

namespace tandem::cuda {

// Note [Streams]: each device has one compute stream on which every op for that device is issued (whatever host
// thread issues it), and one communication stream on which comm issues the work that overlaps the compute stream:
// every started all-reduce (Note [Deferred join] in comm/src/cuda/collective.h) and the overlapping peer copies of
// large scatters and gathers (Note [Comm peer copy ordering] in comm/src/cuda/peer_copies.cpp). Synchronous NCCL
// collectives run on the compute stream, those of the single-process backend (Note [Comm stream ordering] in
// collective.h) as those of a process group (Note [Group collective streams] in comm/src/cuda/group_collectives.cpp),
// and so do small peer copies (on their sources' streams). Both are non-blocking streams created on first use and
// kept for the life of the process. Work crosses streams and devices only through events.
cudaStream_t compute_stream(int device);
cudaStream_t comm_stream(int device);
cublasHandle_t cublas_handle(int device);  // bound to compute_stream(device)

// Makes `consumer` wait (on the device) for all work issued so far on `producer`; no host synchronization. Holds a
// CollectiveLaunchExclusion while it records and enqueues the wait (Note [Launching collectives]).
void stream_wait(cudaStream_t consumer, cudaStream_t producer, int producer_device);
// As stream_wait for several consumers of one producer, with one event record for all of them (a join).
void streams_wait(const std::vector<cudaStream_t>& consumers, cudaStream_t producer, int producer_device);

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
