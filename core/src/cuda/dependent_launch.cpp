#include "cuda/dependent_launch.h"

#include <mutex>

#include "allocator.h"
#include "tandem/core/cuda/context.h"
#include "tandem/core/launch_settings.h"

namespace tandem::cuda::kernels {
namespace {

struct Capability {
  std::once_flag read;
  bool capable = false;
};

bool read_capability(int device, const void* kernel) {
  int major = 0;
  TANDEM_CUDA_CHECK(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device));
  cudaFuncAttributes attributes{};
  TANDEM_CUDA_CHECK(cudaFuncGetAttributes(&attributes, kernel));
  return major >= 9 && attributes.ptxVersion >= 90;
}

}  // namespace

bool may_overlap_previous_kernel(const void* kernel) {
  if (!dependent_launches()) return false;
  static const int count = alloc::cuda_visible_devices();
  static Capability* const devices = new Capability[count > 0 ? count : 1];
  int device = 0;
  TANDEM_CUDA_CHECK(cudaGetDevice(&device));
  TANDEM_INTERNAL_ASSERT(device >= 0 && device < count, "cuda::kernels::launch: the current device cuda:", device,
                         " does not exist (", count, " CUDA devices visible)");
  Capability& entry = devices[device];
  std::call_once(entry.read, [&] { entry.capable = read_capability(device, kernel); });
  return entry.capable;
}

}  // namespace tandem::cuda::kernels
