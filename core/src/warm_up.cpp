#include "tandem/core/warm_up.h"

#include "backend.h"

namespace tandem {

void warm_up(const std::vector<Device>& devices) {
  std::vector<int> gpus;
  for (const Device& device : devices) {
    check_device_available(device, "warm_up");
    if (device.is_cuda()) gpus.push_back(device.index());
  }
  if (!gpus.empty()) backend::cuda_warm_up(gpus);
}

}  // namespace tandem
