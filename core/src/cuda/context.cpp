// Per-device CUDA state: streams, cuBLAS handles, the events that order streams, and CUDA/cuBLAS error reporting.

#include "tandem/core/cuda/context.h"

#include <mutex>
#include <unordered_map>

#include "allocator.h"

namespace tandem::cuda {
namespace {

struct DeviceContext {
  std::once_flag streams_created;
  cudaStream_t compute = nullptr;
  cudaStream_t comm = nullptr;

  std::once_flag cublas_created;
  cublasHandle_t cublas = nullptr;

  std::unordered_map<cudaStream_t, cudaEvent_t> events;  // one reusable event per producer stream of this device,
                                                         // guarded by the collective launch mutex
};

// One context per visible device, created on first use and never destroyed: streams, handles and events live for
// the whole process (destroying them from static destructors could run after the driver has shut down).
DeviceContext& context_of(int device, const char* caller) {
  static const int count = alloc::cuda_visible_devices();
  static DeviceContext* const contexts = new DeviceContext[count];
  // The backends pass the devices of existing tensors and markers, which check_device_available has accepted.
  TANDEM_INTERNAL_ASSERT(device >= 0 && device < count, caller, ": device cuda:", device, " does not exist (", count,
                         " CUDA devices visible)");
  return contexts[device];
}

DeviceContext& with_streams(int device, const char* caller) {
  DeviceContext& context = context_of(device, caller);
  std::call_once(context.streams_created, [&] {
    DeviceGuard guard(device);
    cudaStream_t compute = nullptr;
    cudaStream_t comm = nullptr;
    TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&compute, cudaStreamNonBlocking));
    TANDEM_CUDA_CHECK(cudaStreamCreateWithFlags(&comm, cudaStreamNonBlocking));
    context.compute = compute;
    context.comm = comm;
  });
  return context;
}

}  // namespace

cudaStream_t compute_stream(int device) { return with_streams(device, "cuda::compute_stream").compute; }

cudaStream_t comm_stream(int device) { return with_streams(device, "cuda::comm_stream").comm; }

cublasHandle_t cublas_handle(int device) {
  DeviceContext& context = with_streams(device, "cuda::cublas_handle");
  std::call_once(context.cublas_created, [&] {
    DeviceGuard guard(device);
    cublasHandle_t handle = nullptr;
    TANDEM_CUBLAS_CHECK(cublasCreate(&handle));
    // The handle's configuration never changes after this point, which is what lets several host threads share
    // it (cuBLAS is thread safe for a shared handle as long as nobody reconfigures it).
    TANDEM_CUBLAS_CHECK(cublasSetStream(handle, context.compute));
    context.cublas = handle;
  });
  return context.cublas;
}

// Note [Reused events]: stream_wait records the producer's one cached event and enqueues the wait under a lock.
// cudaStreamWaitEvent waits for the record that precedes it on the host, so recording the same event again for
// a later stream_wait cannot weaken an earlier wait: no event is created per call, and nothing blocks the host.
// Only the creation of an event selects the producer's device (an event belongs to the device current when it is
// created); recording needs the event and the stream on one device, and a stream may wait for an event of any
// device, whatever device is current.
namespace {

// Records the producer's one cached event (creating it on first use); the caller holds a CollectiveLaunchExclusion.
cudaEvent_t record_producer(cudaStream_t producer, int producer_device) {
  DeviceContext& context = context_of(producer_device, "cuda::stream_wait");
  cudaEvent_t& event = context.events[producer];
  if (event == nullptr) {
    DeviceGuard guard(producer_device);
    TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  }
  TANDEM_CUDA_CHECK(cudaEventRecord(event, producer));
  return event;
}

}  // namespace

void stream_wait(cudaStream_t consumer, cudaStream_t producer, int producer_device) {
  if (consumer == producer) return;
  CollectiveLaunchExclusion lock;  // see Note [Launching collectives]
  TANDEM_CUDA_CHECK(cudaStreamWaitEvent(consumer, record_producer(producer, producer_device), 0));
}

void streams_wait(const std::vector<cudaStream_t>& consumers, cudaStream_t producer, int producer_device) {
  CollectiveLaunchExclusion lock;  // see Note [Launching collectives]
  cudaEvent_t event = nullptr;
  for (cudaStream_t consumer : consumers) {
    if (consumer == producer) continue;
    if (event == nullptr) event = record_producer(producer, producer_device);
    TANDEM_CUDA_CHECK(cudaStreamWaitEvent(consumer, event, 0));
  }
}

DeviceGuard::DeviceGuard(int device) {
  TANDEM_CUDA_CHECK(cudaGetDevice(&previous_));
  if (device != previous_) TANDEM_CUDA_CHECK(cudaSetDevice(device));
}

DeviceGuard::~DeviceGuard() {
  int current = previous_;
  if (cudaGetDevice(&current) == cudaSuccess && current != previous_) (void)cudaSetDevice(previous_);
}

void synchronize(int device) {
  DeviceContext& context = with_streams(device, "cuda::synchronize");
  DeviceGuard guard(device);
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(context.compute));
  TANDEM_CUDA_CHECK(cudaStreamSynchronize(context.comm));
}

void throw_cuda_error(cudaError_t status, const char* call, const char* file, int line) {
  // Clears the error when it is not sticky, so that the next launch check does not report it a second time.
  (void)cudaGetLastError();
  detail::throw_error(file, line,
                      detail::concat("CUDA error in ", call, ": ", cudaGetErrorString(status), " (",
                                     cudaGetErrorName(status), ")"));
}

void throw_cublas_error(cublasStatus_t status, const char* call, const char* file, int line) {
  detail::throw_error(file, line,
                      detail::concat("cuBLAS error in ", call, ": ", cublasGetStatusString(status), " (",
                                     cublasGetStatusName(status), ")"));
}

}  // namespace tandem::cuda
