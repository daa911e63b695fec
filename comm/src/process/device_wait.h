#pragma once
// A host wait for the work issued so far on some devices (a barrier's first half).

#include <vector>

#include "tandem/core/device.h"

namespace tandem::comm::detail {

// Returns once every work issued on `devices` before the call is complete: nothing to wait for on CPU devices
// (their work is done when its call returns); on a GPU its compute and communication streams
// (cuda/device_wait.cpp; nocuda/ has CPU devices only).
void wait_for_devices(const std::vector<Device>& devices);

}  // namespace tandem::comm::detail
