// Pinned host slots for DeviceScalars (staged_upload.h).

#include "staged_upload.h"

#include <cuda_runtime.h>

#include <cstring>
#include <memory>
#include <vector>

#include "tandem/core/cuda/context.h"

namespace tandem::detail {

// Note [Pinned upload slots]: cudaMemcpyAsync from pinned memory returns before it reads the memory, so a slot must
// not be written again until its copy has run. The slots are used in turn, and each records an event after its copy;
// writing a slot first waits for that event, which has long completed unless the host runs kSlots uploads ahead of
// the device. The waits are event synchronizations of this object's own events: they never wait for anything else.
struct StagedUpload {
  int device = 0;
  size_t bytes = 0;
  std::vector<void*> slots;
  std::vector<cudaEvent_t> copied;  // [slot]: recorded after the slot's last copy
  size_t next = 0;
};

StagedUpload* create_staged_upload(int device, size_t bytes, size_t slots) {
  auto upload = std::make_unique<StagedUpload>();
  upload->device = device;
  upload->bytes = bytes;
  cuda::DeviceGuard guard(device);
  try {
    for (size_t s = 0; s < slots; ++s) {
      void* slot = nullptr;
      TANDEM_CUDA_CHECK(cudaHostAlloc(&slot, bytes, cudaHostAllocDefault));
      upload->slots.push_back(slot);
      cudaEvent_t event = nullptr;
      TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
      upload->copied.push_back(event);
    }
  } catch (...) {
    destroy_staged_upload(upload.release());
    throw;
  }
  return upload.release();
}

void destroy_staged_upload(StagedUpload* upload) noexcept {
  if (upload == nullptr) return;
  // cudaFreeHost and cudaEventDestroy wait for the copies still reading the slots.
  for (void* slot : upload->slots) (void)cudaFreeHost(slot);
  for (cudaEvent_t event : upload->copied) (void)cudaEventDestroy(event);
  (void)cudaGetLastError();
  delete upload;
}

void staged_upload(StagedUpload& upload, const void* host, const Tensor& dst) {
  const size_t s = upload.next;
  upload.next = (s + 1) % upload.slots.size();
  TANDEM_CUDA_CHECK(cudaEventSynchronize(upload.copied[s]));  // Note [Pinned upload slots]
  std::memcpy(upload.slots[s], host, upload.bytes);
  cuda::DeviceGuard guard(upload.device);
  const cudaStream_t stream = cuda::compute_stream(upload.device);
  TANDEM_CUDA_CHECK(
      cudaMemcpyAsync(dst.mutable_data_ptr(), upload.slots[s], upload.bytes, cudaMemcpyHostToDevice, stream));
  TANDEM_CUDA_CHECK(cudaEventRecord(upload.copied[s], stream));
}

}  // namespace tandem::detail
