#include "tandem/core/cuda/context.h"
#include "tandem/core/device.h"

namespace tandem {

void set_current_device(const Device& device) {
  if (!device.is_cuda()) return;
  check_device_available(device, "set_current_device");
  TANDEM_CUDA_CHECK(cudaSetDevice(device.index()));
}

}  // namespace tandem
