#pragma once
// The checks of DeviceGraph that hold with or without CUDA (device_graph.cpp of either backend).

#include <algorithm>
#include <vector>

#include "tandem/core/device.h"
#include "tandem/core/device_graph.h"
#include "tandem/core/error.h"
#include "tandem/core/tensor.h"

namespace tandem::detail {

inline void check_capture_devices(const std::vector<Device>& devices) {
  constexpr const char* fn = "DeviceGraph::begin_capture";
  TANDEM_CHECK(!devices.empty(), fn, ": got no devices");
  for (const Device& device : devices) {
    TANDEM_CHECK(device.is_cuda(), fn, ": got ", device, " but capture needs CUDA devices");
  }
  check_distinct(devices, fn, "devices");
}

// Throws unless every feed of DeviceGraph::replay(feeds) copies between tensors of one dtype and size into a
// contiguous tensor on one of `devices`.
inline void check_feeds(std::span<const DeviceGraph::Feed> feeds, const std::vector<Device>& devices) {
  constexpr const char* fn = "DeviceGraph::replay";
  for (size_t i = 0; i < feeds.size(); ++i) {
    const Tensor& from = feeds[i].from;
    const Tensor& to = feeds[i].to;
    TANDEM_CHECK(from.defined() && to.defined(), fn, ": feed ", i, " has an undefined tensor");
    TANDEM_CHECK(std::find(devices.begin(), devices.end(), to.device()) != devices.end() && to.is_contiguous(), fn,
                 ": feed ", i, " copies into a tensor on ", to.device(), to.is_contiguous() ? "" : " (not contiguous)",
                 " but expected a contiguous tensor on one of the graph's devices");
    TANDEM_CHECK(from.dtype() == to.dtype() && from.numel() == to.numel(), fn, ": feed ", i, " copies ", from.numel(),
                 " elements of ", from.dtype(), " into ", to.numel(), " of ", to.dtype(),
                 " but expected the same number and dtype");
  }
}

}  // namespace tandem::detail
