// DeviceGraph on CUDA (Note [Captured graphs] in tandem/core/device_graph.h).

#include "tandem/core/device_graph.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "allocator.h"
#include "backend.h"
#include "cuda/captured_draws.h"
#include "device_graph_checks.h"
#include "source_stream_copy.h"
#include "tandem/core/cuda/context.h"
#include "tandem/core/tensor.h"

namespace tandem {

struct DeviceGraph::State {
  std::vector<Device> devices;
  std::vector<uint64_t> pools;  // [device]: the capture pool (Note [Capture pool]); 0 once released
  bool capturing = false;
  std::vector<const void*> fed;  // the destinations that a replay has fed already (Note [Feeding a replay])
  // The random draws the capture recorded (Note [Random draws in captured graphs] in random.h).
  std::unique_ptr<cuda::CapturedDraws> draws;
  cudaGraph_t graph = nullptr;
  cudaGraphExec_t exec = nullptr;

  int origin_device() const { return devices.front().index(); }
  cudaStream_t origin() const { return cuda::compute_stream(origin_device()); }

  // Every stream forked into the capture, with its device: the other devices' compute streams and every device's
  // communication stream.
  std::vector<std::pair<cudaStream_t, int>> forked() const {
    std::vector<std::pair<cudaStream_t, int>> streams;
    for (const Device& device : devices) {
      const int d = device.index();
      if (d != origin_device()) streams.emplace_back(cuda::compute_stream(d), d);
      streams.emplace_back(cuda::comm_stream(d), d);
    }
    return streams;
  }

  void end_pools() noexcept {
    for (const Device& device : devices) alloc::cuda_end_capture_pool(device.index());
  }
  void release_pools() noexcept {
    for (size_t d = 0; d < devices.size(); ++d) {
      if (pools[d] != 0) alloc::cuda_release_capture_pool(devices[d].index(), pools[d]);
      pools[d] = 0;
    }
  }
};

DeviceGraph::DeviceGraph() = default;

DeviceGraph::~DeviceGraph() {
  if (state_ == nullptr) return;
  abort_capture();
  static constinit detail::ReportOnce failures("DeviceGraph: destroying a captured graph");
  failures.run([this] {
    // The last replay may still run on any of the devices (Note [Captured graphs]).
    if (state_->exec != nullptr) {
      for (const Device& device : state_->devices) cuda::synchronize(device.index());
    }
    if (state_->exec != nullptr) TANDEM_CUDA_CHECK(cudaGraphExecDestroy(state_->exec));
    if (state_->graph != nullptr) TANDEM_CUDA_CHECK(cudaGraphDestroy(state_->graph));
    state_->exec = nullptr;
    state_->graph = nullptr;
  });
  // Only after the synchronization: until then, a replay may still use the pools' blocks. A failure above leaves
  // them to the graph (leaked), which is safe.
  if (state_->exec == nullptr && state_->graph == nullptr) state_->release_pools();
}

void DeviceGraph::begin_capture(const std::vector<Device>& devices) {
  constexpr const char* fn = "DeviceGraph::begin_capture";
  detail::check_capture_devices(devices);
  for (const Device& device : devices) check_device_available(device, fn);
  // a fault of earlier work now, and each device's fault record before the capture needs it
  for (const Device& device : devices) backend::cuda_raise_index_fault(device.index());
  TANDEM_CHECK(state_ == nullptr, fn, ": this graph has ",
               state_ && state_->capturing ? "a capture open"
                                           : "been "
                                             "captured",
               " already; a DeviceGraph captures once");
  auto state = std::make_unique<State>();
  state->devices = devices;
  state->pools.assign(devices.size(), 0);
  state->draws = std::make_unique<cuda::CapturedDraws>(devices);  // before the pools: its slots outlive replays
  try {
    for (size_t d = 0; d < devices.size(); ++d) state->pools[d] = alloc::cuda_begin_capture_pool(devices[d].index());
  } catch (...) {
    state->end_pools();
    state->release_pools();
    throw;
  }
  state_ = std::move(state);
  try {
    cuda::DeviceGuard guard(state_->origin_device());
    TANDEM_CUDA_CHECK(cudaStreamBeginCapture(state_->origin(), cudaStreamCaptureModeRelaxed));
    state_->capturing = true;
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    unsigned long long capture_id = 0;
    TANDEM_CUDA_CHECK(cudaStreamGetCaptureInfo(state_->origin(), &status, &capture_id));
    state_->draws->attach(capture_id);
    for (const auto& [stream, device] : state_->forked()) {
      cuda::stream_wait(stream, state_->origin(), state_->origin_device());
    }
  } catch (...) {
    abort_capture();
    throw;
  }
}

void DeviceGraph::end_capture() {
  constexpr const char* fn = "DeviceGraph::end_capture";
  TANDEM_CHECK(capturing(), fn, ": no capture is open");
  cudaGraph_t graph = nullptr;
  try {
    for (const auto& [stream, device] : state_->forked()) cuda::stream_wait(state_->origin(), stream, device);
    cuda::DeviceGuard guard(state_->origin_device());
    const cudaError_t status = cudaStreamEndCapture(state_->origin(), &graph);
    state_->capturing = false;
    state_->draws->detach();
    state_->end_pools();
    if (status != cudaSuccess || graph == nullptr) {
      (void)cudaGetLastError();
      TANDEM_FAIL(fn, ": the capture failed: ", cudaGetErrorString(status), " (", cudaGetErrorName(status), ")");
    }
    state_->graph = graph;
    TANDEM_CUDA_CHECK(cudaGraphInstantiate(&state_->exec, state_->graph, 0));
  } catch (...) {
    if (state_->capturing) {
      abort_capture();
    } else {
      // Nothing of the graph ever ran, so its memory can go back to the caches at once.
      if (state_->graph != nullptr) (void)cudaGraphDestroy(state_->graph);
      (void)cudaGetLastError();
      state_->graph = nullptr;
      state_->exec = nullptr;
      state_->release_pools();
    }
    throw;
  }
}

void DeviceGraph::abort_capture() noexcept {
  if (!capturing()) return;
  State& state = *state_;
  // Joining first keeps a capture that is still valid from failing as unjoined; on an invalidated capture the
  // joins fail, and ending the capture on its origin stream ends it on every stream.
  for (const auto& [stream, device] : state.forked()) {
    try {
      cuda::stream_wait(state.origin(), stream, device);
    } catch (const Error&) {
    }
  }
  int previous = 0;
  const bool restore = cudaGetDevice(&previous) == cudaSuccess;
  (void)cudaSetDevice(state.origin_device());
  cudaGraph_t graph = nullptr;
  (void)cudaStreamEndCapture(state.origin(), &graph);
  if (graph != nullptr) (void)cudaGraphDestroy(graph);
  if (restore) (void)cudaSetDevice(previous);
  (void)cudaGetLastError();  // the capture's error is not sticky: later work on the streams must not see it
  state.capturing = false;
  state.draws->detach();
  state.end_pools();
  state.release_pools();  // nothing that the capture recorded ever ran
}

void DeviceGraph::replay() { replay(std::span<const Feed>()); }

void DeviceGraph::replay(std::span<const Feed> feeds) {
  TANDEM_CHECK(ready(), "DeviceGraph::replay: nothing was captured");
  State& state = *state_;
  detail::check_feeds(feeds, state.devices);
  // what an earlier replay's index checks found (Note [Index checks on the device] in backend.h)
  for (const Device& device : state.devices) backend::cuda_raise_index_fault(device.index());
  for (const Feed& feed : feeds) {
    const bool fed = std::find(state.fed.begin(), state.fed.end(), feed.to.data_ptr()) != state.fed.end();
    const bool on_graph_gpu =
        std::find(state.devices.begin(), state.devices.end(), feed.from.device()) != state.devices.end();
    if (fed && on_graph_gpu && feed.from.is_contiguous()) {
      detail::cuda_copy_on_source_stream(feed.from, feed.to);  // Note [Feeding a replay]
    } else {
      Tensor(feed.to).copy_(feed.from);  // ordered by events on the destination's compute stream
      if (!fed) state.fed.push_back(feed.to.data_ptr());
    }
  }
  state.draws->prepare_replay();  // on the devices' compute streams, which the launch waits for
  const int origin_device = state.origin_device();
  const cudaStream_t origin = state.origin();
  std::vector<cudaStream_t> others;  // the other devices' compute streams
  for (const Device& device : state.devices) {
    const int d = device.index();
    if (d == origin_device) continue;
    others.push_back(cuda::compute_stream(d));
    cuda::stream_wait(origin, others.back(), d);
  }
  {
    cuda::DeviceGuard guard(origin_device);
    // One launch starts the collectives of every device (Note [Launching collectives]).
    cuda::CollectiveLaunchLock lock;
    TANDEM_CUDA_CHECK(cudaGraphLaunch(state.exec, origin));
  }
  if (!others.empty()) cuda::streams_wait(others, origin, origin_device);
}

bool DeviceGraph::capturing() const { return state_ != nullptr && state_->capturing; }

bool DeviceGraph::ready() const { return state_ != nullptr && state_->exec != nullptr; }

namespace {

std::vector<cudaGraphNode_t> graph_nodes(cudaGraph_t graph) {
  size_t count = 0;
  TANDEM_CUDA_CHECK(cudaGraphGetNodes(graph, nullptr, &count));
  std::vector<cudaGraphNode_t> nodes(count);
  if (count > 0) TANDEM_CUDA_CHECK(cudaGraphGetNodes(graph, nodes.data(), &count));
  nodes.resize(count);
  return nodes;
}

}  // namespace

size_t DeviceGraph::nodes() const { return ready() ? graph_nodes(state_->graph).size() : 0; }

size_t DeviceGraph::kernel_nodes() const {
  if (!ready()) return 0;
  size_t kernels = 0;
  for (cudaGraphNode_t node : graph_nodes(state_->graph)) {
    cudaGraphNodeType type{};
    TANDEM_CUDA_CHECK(cudaGraphNodeGetType(node, &type));
    if (type == cudaGraphNodeTypeKernel) ++kernels;
  }
  return kernels;
}

void DeviceGraph::debug_dump(const std::string& path) const {
  TANDEM_CHECK(ready(), "DeviceGraph::debug_dump: nothing was captured");
  const unsigned flags = cudaGraphDebugDotFlagsKernelNodeParams | cudaGraphDebugDotFlagsMemcpyNodeParams |
                         cudaGraphDebugDotFlagsMemsetNodeParams | cudaGraphDebugDotFlagsEventNodeParams;
  const cudaError_t status = cudaGraphDebugDotPrint(state_->graph, path.c_str(), flags);
  if (status != cudaSuccess) (void)cudaGetLastError();
  TANDEM_CHECK(status == cudaSuccess, "DeviceGraph::debug_dump: cannot write '", path, "': ",
               cudaGetErrorString(status));
}

const std::vector<Device>& DeviceGraph::devices() const {
  static const std::vector<Device> none;
  return state_ != nullptr ? state_->devices : none;
}

}  // namespace tandem
