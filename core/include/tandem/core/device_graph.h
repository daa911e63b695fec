#pragma once
// DeviceGraph: the work issued on some GPUs' streams, captured once as one CUDA graph and replayed with a single
// launch (cudaStreamBeginCapture / cudaGraphInstantiate / cudaGraphLaunch), for steps whose host-side cost (kernel
// launches, event waits, collective launches) exceeds their device time.
//
//   DeviceGraph graph;
//   graph.begin_capture(devices);   // nothing issued on the devices' streams runs from here on: it is recorded
//   ... issue the work (ops, comm collectives) ...
//   graph.end_capture();            // instantiates; throws if anything in between broke the capture
//   graph.replay();                 // runs the recorded work, as often as needed
//
// Note [Captured graphs]: the capture begins on devices[0]'s compute stream, in relaxed mode (other threads may
// allocate while it runs), and forks every other stream that tandem issues work on into it (the other devices'
// compute streams and every device's communication stream, Note [Streams] in cuda/context.h) by an event, so that
// all work issued on those streams in between, from any thread, lands in the one graph: every op, every cross-stream
// event wait (which becomes a graph edge), every NCCL collective (the communicators must exist before the capture).
// end_capture joins every forked stream back into the origin, ends the capture and instantiates the graph. While
// capturing, nothing runs, and host work that waits for a device (a copy to the host, a synchronize, an event query)
// or copies from pageable host memory is not allowed: CUDA invalidates the capture and the failing call throws; the
// capture must then be ended with abort_capture(), which leaves every stream as it was before begin_capture.
// Random draws onto the devices (Tensor::rand, Tensor::uniform, so Dropout's masks) are recorded, not drawn: each
// replay draws values of its own, moving the generator's counters as the same draws made eagerly would (Note [Random
// draws in captured graphs] in random.h); the draws made on the host (Tensor::randn, randint) throw for a GPU whose
// stream is captured. Device memory allocated or freed on the devices while capturing belongs to the graph (Note
// [Capture pool] in cuda/caching_allocator.cpp) until the graph is destroyed. A replay reads and writes exactly the
// memory the capture used, so every tensor the captured work used must live, at the same address, as long as the
// graph: inputs are fed by copying into tensors allocated before the capture, never by replacing them.
// replay() is ordered like any op: after all work issued before it on the devices' compute streams, and before all
// work issued after it there (event waits on the device; the host does not wait).
//
// Note [Feeding a replay]: replay(feeds) first copies each feed's source into its destination, a tensor that the
// graph reads (a static input), then replays. The first replay that feeds a destination copies as Tensor::copy_
// does (ordered by events with the earlier users of the destination's block, which may have served other tensors
// before). Later ones issue a single asynchronous copy on the source's compute stream (when the source is a
// contiguous tensor on one of the graph's GPUs), with no event of its own: that stream is after the previous
// replay (which every compute stream of the graph waits for), so after the last use of the destination, which only
// the graph and its feeds use; the replay's own wait for the devices' compute streams orders the graph after the
// copy; and the source's block is reused only after the copy, as the copy runs on the stream the block belongs to.
// So a replay fed from one GPU costs one copy call per feed, two event calls per further device before the launch
// (its compute stream's record and the origin's wait) and, after it, one record on the origin and one wait per
// further device.
// The destructor synchronizes the graph's devices before it destroys the graph: destroy graphs before anything they
// captured (communicators included; comm's cached ones are never destroyed).
// Not thread-safe: one thread drives a DeviceGraph; while it captures, no other thread may issue work on the devices
// (it would land in the graph).

#include <cstddef>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tandem/core/device.h"

namespace tandem {

class Tensor;

// Whether `device` is a GPU whose compute stream a DeviceGraph is capturing (torch.cuda.is_current_stream_capturing):
// work issued for it now is recorded, not run, so nothing may wait for it. False for CPU devices.
bool is_capturing(Device device);

class DeviceGraph {
 public:
  DeviceGraph();
  ~DeviceGraph();  // ends a capture still open (abort_capture), then synchronizes and destroys; never throws
  DeviceGraph(const DeviceGraph&) = delete;
  DeviceGraph& operator=(const DeviceGraph&) = delete;

  // Starts capturing the work issued on the devices' streams. Errors: no devices; a device listed twice, not a
  // CUDA device ("capture needs CUDA devices") or not existing; a capture already begun on this graph or active on
  // one of the devices; tandem built without CUDA.
  void begin_capture(const std::vector<Device>& devices);
  // Ends the capture and instantiates the graph. Errors: no capture open; a capture that CUDA invalidated or that
  // cannot be instantiated (the CUDA error named): the capture is then aborted, as abort_capture() does.
  void end_capture();
  // Ends a capture without keeping anything (after an exception while capturing): every stream stops capturing and
  // the memory the capture allocated returns to the devices' caches. Does nothing without an open capture.
  void abort_capture() noexcept;
  // Runs the captured work once (see Note [Captured graphs] for the ordering); its random draws reserve their values
  // from the generator's streams now (Note [Random draws in captured graphs] in random.h). Errors: nothing captured.
  void replay();
  // A copy that replay(feeds) makes before the graph runs: `from` (any device, contiguous or not) into `to`.
  struct Feed {
    const Tensor& from;
    const Tensor& to;
  };
  // Copies every feed, then replays (Note [Feeding a replay]). Requires: each `to` is a contiguous tensor on one of
  // the graph's devices that nothing but the graph and its feeds reads or writes between replays (the static inputs
  // the graph was captured with). Errors: nothing captured; a feed whose `to` is on another device than the graph's
  // or not contiguous, or whose tensors differ in dtype or number of elements (each naming the feed).
  void replay(std::span<const Feed> feeds);

  bool capturing() const;
  bool ready() const;  // captured and instantiated: replay() may run
  // How many nodes the captured graph holds, and how many of them are kernels (each memcpy, memset, event and
  // collective node counts as a node; NCCL's kernels count as kernels). 0 before a capture.
  size_t nodes() const;
  size_t kernel_nodes() const;
  // Writes the captured graph as Graphviz text to `path` (cudaGraphDebugDotPrint, with kernel names and copy
  // sizes), for looking at what a step launches. Errors: nothing captured; a path that cannot be written.
  void debug_dump(const std::string& path) const;
  const std::vector<Device>& devices() const;

 private:
  struct State;  // the CUDA objects (cuda/device_graph.cpp)
  std::unique_ptr<State> state_;
};

}  // namespace tandem
