#pragma once
// The checks of DeviceGraph::begin_capture that hold with or without CUDA (device_graph.cpp of either backend).

#include <algorithm>
#include <vector>

#include "tandem/core/device.h"
#include "tandem/core/error.h"

namespace tandem::detail {

inline void check_capture_devices(const std::vector<Device>& devices) {
  constexpr const char* fn = "DeviceGraph::begin_capture";
  TANDEM_CHECK(!devices.empty(), fn, ": got no devices");
  for (size_t i = 0; i < devices.size(); ++i) {
    TANDEM_CHECK(devices[i].is_cuda(), fn, ": got ", devices[i], " but capture needs CUDA devices");
    TANDEM_CHECK(std::find(devices.begin(), devices.begin() + static_cast<std::ptrdiff_t>(i), devices[i]) ==
                     devices.begin() + static_cast<std::ptrdiff_t>(i),
                 fn, ": ", devices[i], " is listed twice");
  }
}

}  // namespace tandem::detail
