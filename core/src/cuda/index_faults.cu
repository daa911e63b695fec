// Index checks on the device and each device's fault record (backend.h's cuda_check_indices_on_device and
// cuda_raise_index_fault; Note [Index checks on the device] there).

#include <cuda_runtime.h>

#include <array>
#include <mutex>

#include "backend.h"
#include "cuda/launch.cuh"
#include "cuda/strided_index.cuh"
#include "tandem/core/cuda/context.h"
#include "tandem/core/error.h"

namespace tandem::backend {
namespace {

// The first bad index a check kernel found on one device, in mapped page-locked host memory: written by the one
// thread that won the device's claim word (device memory: atomics on host memory need PCIe atomics), `found` last,
// and read by the host only after waiting for the device.
struct IndexFault {
  unsigned int found;
  const char* caller;
  int64_t value, position, limit, dim;
};

// One device's record and its claim word.
struct FaultRecord {
  IndexFault* fault = nullptr;
  unsigned int* claim = nullptr;
};

constexpr int kMaxDevices = 64;

__device__ void check_index_kernel(int64_t n, cuda::kernels::Strided s, const int64_t* index, int64_t limit,
                                   int64_t dim, bool has_ignore, int64_t ignore, const char* caller,
                                   FaultRecord record) {
  for (int64_t i = cuda::kernels::global_thread(); i < n; i += cuda::kernels::grid_threads()) {
    int64_t offset[cuda::kernels::kMaxOperands];
    cuda::kernels::strided_offsets<1>(i, s, offset);
    const int64_t v = index[offset[0]];
    if ((v >= 0 && v < limit) || (has_ignore && v == ignore)) continue;
    if (atomicCAS(record.claim, 0u, 1u) == 0u) {
      IndexFault* fault = record.fault;
      fault->caller = caller;
      fault->value = v;
      fault->position = i;
      fault->limit = limit;
      fault->dim = dim;
      __threadfence_system();
      fault->found = 1u;
    }
  }
}

// Each device's record, allocated on first use and kept for the process.
FaultRecord fault_record(int device) {
  static std::mutex mutex;
  static std::array<FaultRecord, kMaxDevices> records{};
  TANDEM_CHECK(device >= 0 && device < kMaxDevices, "index checks: CUDA device ", device, " is beyond the ",
               kMaxDevices, " devices tandem tracks");
  std::lock_guard<std::mutex> lock(mutex);
  FaultRecord& record = records[device];
  if (record.fault == nullptr) {
    cuda::DeviceGuard guard(device);
    void* memory = nullptr;
    TANDEM_CUDA_CHECK(cudaHostAlloc(&memory, sizeof(IndexFault), cudaHostAllocMapped | cudaHostAllocPortable));
    void* claim = nullptr;
    TANDEM_CUDA_CHECK(cudaMalloc(&claim, sizeof(unsigned int)));
    TANDEM_CUDA_CHECK(cudaMemset(claim, 0, sizeof(unsigned int)));
    record = {new (memory) IndexFault{}, static_cast<unsigned int*>(claim)};
  }
  return record;
}

}  // namespace

void cuda_check_indices_on_device(const char* caller, const Tensor& index, int64_t limit, int64_t dim,
                                  std::optional<int64_t> ignore_index) {
  const int64_t n = index.numel();
  if (n == 0) return;
  const int device = index.device().index();
  const FaultRecord record = fault_record(device);
  cuda::DeviceGuard guard(device);
  cuda::kernels::launch<check_index_kernel>(cuda::kernels::blocks_for(n), cuda::kernels::kThreads,
                                            cuda::compute_stream(device), n,
                                            cuda::collapse_dims(index.shape(), {&index.strides()}),
                                            static_cast<const int64_t*>(index.data_ptr()), limit, dim,
                                            ignore_index.has_value(), ignore_index.value_or(0), caller, record);
}

void cuda_raise_index_fault(int device) {
  const FaultRecord record = fault_record(device);
  volatile IndexFault* fault = record.fault;
  if (fault->found == 0u) return;
  const IndexFault found{1u, fault->caller, fault->value, fault->position, fault->limit, fault->dim};
  fault->found = 0u;
  {  // the next check may claim again, after the work issued so far
    cuda::DeviceGuard guard(device);
    TANDEM_CUDA_CHECK(cudaMemsetAsync(record.claim, 0, sizeof(unsigned int), cuda::compute_stream(device)));
  }
  if (found.dim >= 0)
    TANDEM_FAIL(found.caller, ": index ", found.value, " at position ", found.position,
                " is out of range for dimension ", found.dim, " of size ", found.limit,
                " (found on cuda:", device, " by work captured in a CUDA graph)");
  TANDEM_FAIL(found.caller, ": index ", found.value, " at position ", found.position, " is out of range for ",
              found.limit, " classes (found on cuda:", device, " by work captured in a CUDA graph)");
}

}  // namespace tandem::backend
