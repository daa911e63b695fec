// DeviceGraph without CUDA: nothing can be captured, so every graph stays empty.

#include "tandem/core/device_graph.h"

#include "device_graph_checks.h"

namespace tandem {

struct DeviceGraph::State {};

DeviceGraph::DeviceGraph() = default;
DeviceGraph::~DeviceGraph() = default;

void DeviceGraph::begin_capture(const std::vector<Device>& devices) {
  detail::check_capture_devices(devices);
  TANDEM_FAIL("DeviceGraph::begin_capture: tandem was built without CUDA (configure with -DTANDEM_CUDA=ON)");
}

void DeviceGraph::end_capture() { TANDEM_FAIL("DeviceGraph::end_capture: no capture is open"); }

void DeviceGraph::abort_capture() noexcept {}

void DeviceGraph::replay() { TANDEM_FAIL("DeviceGraph::replay: nothing was captured"); }

void DeviceGraph::replay(std::span<const Feed>) { replay(); }

bool DeviceGraph::capturing() const { return false; }

bool DeviceGraph::ready() const { return false; }

size_t DeviceGraph::nodes() const { return 0; }

size_t DeviceGraph::kernel_nodes() const { return 0; }

void DeviceGraph::debug_dump(const std::string&) const { TANDEM_FAIL("DeviceGraph::debug_dump: nothing was captured"); }

const std::vector<Device>& DeviceGraph::devices() const {
  static const std::vector<Device> none;
  return none;
}

}  // namespace tandem
