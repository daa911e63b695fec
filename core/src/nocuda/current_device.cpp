#include "tandem/core/device.h"

namespace tandem {

// Without CUDA only CPU devices exist, and they have no notion of a current device; a CUDA device is reported.
void set_current_device(const Device& device) {
  if (device.is_cuda()) check_device_available(device, "set_current_device");
}

}  // namespace tandem
