// The device collectives of a process group on CUDA devices (device_collectives.h): one NCCL communicator over every
// GPU of every process. Each call is one NCCL group on the local devices: the synchronous collectives on their compute
// streams, the started all-reduce on their communication streams (Note [Group collective streams]); every launch is
// watched by the group's watchdog until it completes (Note [Watching NCCL work]), except one recorded into a CUDA
// graph, whose replays are watched instead (Note [Collectives inside a graph capture]).

#include <nccl.h>

#include <atomic>
#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "collective.h"
#include "nccl_check.h"
#include "process/device_collectives.h"
#include "process/launch_tracker.h"
#include "tandem/core/cuda/context.h"
#include "tandem/core/error.h"

namespace tandem::comm::detail {
namespace {

// One event per local rank, on its device: recorded behind one launch on each device's stream.
class DeviceEvents {
 public:
  explicit DeviceEvents(const std::vector<int>& devices);
  ~DeviceEvents();
  DeviceEvents(DeviceEvents&& other) noexcept : events_(std::exchange(other.events_, {})) {}
  DeviceEvents& operator=(DeviceEvents&&) = delete;
  DeviceEvents(const DeviceEvents&) = delete;
  DeviceEvents& operator=(const DeviceEvents&) = delete;

  cudaEvent_t operator[](size_t rank) const { return events_[rank]; }
  // Whether every event has completed. Errors: a CUDA error of an event (a failed kernel before it).
  bool complete() const;

 private:
  std::vector<cudaEvent_t> events_;
};

DeviceEvents::DeviceEvents(const std::vector<int>& devices) : events_(devices.size(), nullptr) {
  for (size_t i = 0; i < devices.size(); ++i) {
    cuda::DeviceGuard guard(devices[i]);  // an event belongs to the device current at its creation
    TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&events_[i], cudaEventDisableTiming));
  }
}

DeviceEvents::~DeviceEvents() {
  static constinit tandem::detail::ReportOnce failures("destroying the events of a process group's collectives");
  for (cudaEvent_t event : events_) {
    if (event != nullptr) failures.run([&] { TANDEM_CUDA_CHECK(cudaEventDestroy(event)); });
  }
}

bool DeviceEvents::complete() const {
  for (cudaEvent_t event : events_) {
    const cudaError_t status = cudaEventQuery(event);
    if (status == cudaErrorNotReady) return false;
    TANDEM_CUDA_CHECK(status);
  }
  return true;
}

using Tracker = LaunchTracker<DeviceEvents>;

// The id of the stream capture that `streams` are part of, or nullopt when none of them is being captured. Every
// stream of one launch must be in the same capture or in none: a DeviceGraph forks all of a device set's streams into
// one capture (Note [Captured graphs] in device_graph.h). Errors: streams in different captures, or some captured.
std::optional<unsigned long long> capture_of(const std::vector<cudaStream_t>& streams) {
  std::optional<unsigned long long> first;
  for (size_t r = 0; r < streams.size(); ++r) {
    cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    unsigned long long id = 0;
    TANDEM_CUDA_CHECK(cudaStreamGetCaptureInfo(streams[r], &status, &id));
    const std::optional<unsigned long long> mine =
        status == cudaStreamCaptureStatusNone ? std::nullopt : std::optional<unsigned long long>(id);
    if (r == 0) first = mine;
    const auto state = [](const std::optional<unsigned long long>& capture) {
      return capture ? tandem::detail::concat("in capture ", *capture) : std::string("not being captured");
    };
    TANDEM_CHECK(mine == first, "comm::ProcessGroup: the stream of local rank ", r, " is ", state(mine),
                 " but local rank 0's is ", state(first),
                 "; expected every local device's stream in one capture (a DeviceGraph over all of the group's "
                 "devices) or none");
  }
  return first;
}

// Note [Watching NCCL work]: a collective issued on the GPUs returns at once, and its kernels then wait on the device
// for their peers, forever if a peer never comes (Note [A distributed job never hangs]). So after each launch an event
// is recorded behind it on every local stream it ran on, and the launch is published to the group's tracker (Note
// [Watching launches] in launch_tracker.h), which one device watch of the group's watchdog polls: the oldest launch
// not yet complete (cudaEventQuery) is reported once it is past its deadline, and the watch fails, with NCCL's message,
// once ncclCommGetAsyncError reports an error on any local communicator while work is pending (a peer that died, a
// broken connection). Issuing a collective costs one event record per device and an atomic exchange: no allocation,
// no string, no lock shared with the watchdog. The watch shares the communicators' state with the collectives object:
// a poll after the communicators were destroyed or aborted finds them gone and reports nothing instead of touching
// released handles.
//
// Note [Collectives inside a graph capture]: a collective issued while its streams are being captured into a CUDA
// graph (parallel::TrainingStep, Note [Captured graphs] in device_graph.h) runs nothing now: NCCL records its kernels
// into the graph (the communicator exists since the group's creation, and the eager steps before any capture have
// connected it), and they run at each replay of the graph. An event recorded behind it belongs to the capture: the
// host cannot query it (cudaEventQuery fails on it), and it never completes as such. So such a launch is neither
// published to the tracker nor given the tracker's events: it records events of its own (capture_events_), which
// order the captured launches among themselves exactly as the tracker's events order eager ones (Note [Group
// collective streams]) and become edges of the graph. The first captured launch of a capture waits for no earlier
// launch (an event recorded outside the capture cannot be waited for inside it), and needs not: the graph starts
// after the work issued before its replay on the devices' compute streams, where every eager launch before it runs or
// has been joined (a started all-reduce is joined before its step ends, GradientReducer::finish). And an eager launch
// after a replay is ordered after it by the same streams. The watchdog still bounds the captured collectives: whoever
// replays the graph calls ProcessGroup::watch_replay right after the launch, which publishes one launch of events
// recorded behind the replay on the compute streams (watch_issued), in the same sequence as the collectives, so a
// replay whose collectives never finish (a peer stopped or died) ends the job like a stuck collective. The launch
// is marked as issuing while NCCL's host calls run (Note [Watching NCCL's host calls]), so a capture that hangs in
// NCCL on the host is bounded too. NCCL's rules for graphs (its "Using NCCL with CUDA Graphs"): whether a collective
// is captured must be the same on every rank, and a graph's replay is collective with the graphs of the ranks that
// captured with it; parallel::TrainingStep makes that decision with every process (Note [Capturing across
// processes] in training_step.h). Graphs must be destroyed before the communicators (Note [Process group
// communicators are destroyed]).
//
// Note [Watching NCCL's host calls]: NCCL may also wait on the HOST inside a launch: the first collective of a
// communicator connects to its peers there (NCCL connects lazily), and waits for peers that never come. The launch
// cannot be published before its events are recorded behind it, so while the launching thread is inside NCCL's calls
// it marks the launch as being issued (issue time, name, number and size, in atomics: no lock, no allocation), and
// the poll reports that launch as pending from its issue time. Its deadline is then the same as if it had been
// published, and the watchdog's abort ends the job.
class Communicators {
 public:
  enum class Phase { Live, Destroyed, Aborted };

  explicit Communicators(std::vector<int> devices_)
      : devices(std::move(devices_)), tracker([this] { return DeviceEvents(devices); }) {}
  Communicators(const Communicators&) = delete;
  Communicators& operator=(const Communicators&) = delete;

  const std::vector<int> devices;  // local rank i drives CUDA device devices[i]
  std::vector<ncclComm_t> comms;   // the communicator of local rank i
  int first_rank = 0;              // the global rank of local rank 0
  Tracker tracker;                 // launching side: the collectives object, under the collective launch lock
  // The launch inside NCCL's host calls now (Note [Watching NCCL's host calls]): issuing_since is its issue time in
  // Clock ticks, 0 when none; written by the launching thread, read by the poll.
  std::atomic<Watchdog::Clock::rep> issuing_since{0};
  std::atomic<const char*> issuing_name{""};
  std::atomic<uint64_t> issuing_number{0};
  std::atomic<uint64_t> issuing_bytes{0};

  // Moves from Live to `next`; false when another caller already left Live (then releasing the communicators is not
  // this caller's job).
  bool leave_live(Phase next);
  bool live();

  // The device watch's poll (watchdog thread): the oldest launch not known to be complete. Errors: an asynchronous
  // NCCL error on a local communicator while a launch is pending; a CUDA error of the events.
  std::optional<Watchdog::Pending> poll();

 private:
  std::mutex mutex_;  // guards phase_
  Phase phase_ = Phase::Live;
};

bool Communicators::leave_live(Phase next) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (phase_ != Phase::Live) return false;
  phase_ = next;
  return true;
}

bool Communicators::live() {
  std::lock_guard<std::mutex> lock(mutex_);
  return phase_ == Phase::Live;
}

std::optional<Watchdog::Pending> Communicators::poll() {
  std::lock_guard<std::mutex> lock(mutex_);  // keeps destroy and abort from releasing the communicators meanwhile
  if (phase_ != Phase::Live) return std::nullopt;
  if (const Watchdog::Clock::rep since = issuing_since.load(std::memory_order_acquire); since != 0) {
    return Watchdog::Pending{Watchdog::Clock::time_point(Watchdog::Clock::duration(since)),
                             tandem::detail::concat(issuing_name.load(std::memory_order_relaxed), " #",
                                                    issuing_number.load(std::memory_order_relaxed), " of ",
                                                    issuing_bytes.load(std::memory_order_relaxed), " bytes")};
  }
  std::optional<Watchdog::Pending> pending = tracker.poll([](const DeviceEvents& events) { return events.complete(); });
  if (!pending) return std::nullopt;
  for (size_t i = 0; i < comms.size(); ++i) {
    ncclResult_t async = ncclSuccess;
    TANDEM_NCCL_CHECK(ncclCommGetAsyncError(comms[i], &async));
    if (async != ncclSuccess && async != ncclInProgress) {
      TANDEM_FAIL("comm::ProcessGroup: NCCL reported an asynchronous error on global rank ", first_rank + i,
                  " (cuda:", devices[i], ") while ", pending->what, " was pending: ", ncclGetErrorString(async), " (",
                  ncclGetLastError(comms[i]), ")");
    }
  }
  return pending;
}

// Creates the communicator over channel.size() * devices.size() GPUs: local device i is global rank
// channel.rank() * devices.size() + i. A communicator whose creation failed is left alone: the job ends with the error.
std::shared_ptr<Communicators> create_communicators(HostChannel& channel, Watchdog& watchdog,
                                                    const std::vector<Device>& devices) {
  std::vector<int> indices;
  for (const Device& device : devices) {
    TANDEM_INTERNAL_ASSERT(device.is_cuda(), "make_nccl_collectives: got ", device, " but expected CUDA devices");
    indices.push_back(device.index());
  }
  auto created = std::make_shared<Communicators>(std::move(indices));
  const int local_ranks = static_cast<int>(devices.size());
  const int ranks = channel.size() * local_ranks;
  created->first_rank = channel.rank() * local_ranks;

  ncclUniqueId id{};
  if (channel.rank() == 0) TANDEM_NCCL_CHECK(ncclGetUniqueId(&id));
  {
    Armed armed(watchdog, "sending the NCCL unique id from process 0");
    channel.broadcast(std::as_writable_bytes(std::span(&id, 1)), 0);
  }

  Armed armed(watchdog, tandem::detail::concat("creating the NCCL communicator over ", ranks, " GPUs"));
  // NCCL allocates and frees device memory as it creates a communicator, which must not fall between two launches of
  // a collective that another thread issues (Note [Launching collectives]).
  cuda::CollectiveLaunchExclusion exclusion;
  created->comms.assign(devices.size(), nullptr);
  nccl::Group group;  // one group, so that this process's ranks join the communicator together
  for (size_t i = 0; i < devices.size(); ++i) {
    cuda::DeviceGuard guard(created->devices[i]);  // ncclCommInitRank binds the communicator to the current device
    TANDEM_NCCL_CHECK(ncclCommInitRank(&created->comms[i], ranks, id, created->first_rank + static_cast<int>(i)));
  }
  group.end();
  return created;
}

// Note [Average as a pre-multiplied sum]: ReduceOp::Average divides by the number of processes, not of GPUs (as
// PyTorch's DDP averages over its ranks). NCCL's ncclAvg divides by the communicator's size (every GPU of every
// process), so it does not fit when a process drives several GPUs. A sum followed by a scaling kernel would read and
// write the result once more and add a launch per device. So each local communicator gets, once, a PreMulSum operator
// with the host scalar 1 / processes (ncclScalarHostImmediate: read at creation): NCCL multiplies each input by it as
// it loads it, inside the reduction's own pass. The result is the sum of the scaled inputs, which equals the scaled sum
// exactly when the number of processes is a power of two and within a rounding step per input otherwise. With one
// process the average is the sum, and plain ncclSum is used. The operators are released with their communicators.
std::vector<ncclRedOp_t> create_average_ops(const Communicators& communicators, int processes) {
  std::vector<ncclRedOp_t> ops;
  if (processes == 1) return ops;
  float scale = 1.0f / static_cast<float>(processes);
  for (ncclComm_t comm : communicators.comms) {
    ncclRedOp_t op{};
    TANDEM_NCCL_CHECK(ncclRedOpCreatePreMulSum(&op, &scale, ncclFloat, ncclScalarHostImmediate, comm));
    ops.push_back(op);
  }
  return ops;
}

using nccl::count_of;

// How long abort() waits for ncclCommAbort (Note [Bounded abort]).
constexpr std::chrono::seconds kAbortWait{10};

// Note [Group collective streams]: a synchronous collective (all_reduce, broadcast, all_gather, reduce_scatter) is
// issued on each local device's compute stream, where its inputs were produced and its results are consumed, and
// where the caching allocator orders the reuse of its blocks (Note [Stream-ordered reuse]): no stream waits at all,
// as a raw NCCL call on the caller's stream. Only start_all_reduce runs on the communication streams, after its
// markers, so that it overlaps the compute stream until its join (Note [Deferred join] in collective.h).
//
// The kernels of one NCCL communicator must run in the order every rank issued them: two of them running at once on
// two streams of one device may take each other's data or wait for each other forever (NCCL leaves it undefined).
// Two streams would allow that: a synchronous collective issued after a started all-reduce could run before or
// beside it on the compute stream (its join may not have come yet), and a started all-reduce whose marker precedes
// an earlier synchronous collective could run beside that one. So each launch whose stream differs from the previous
// launch's first makes its streams wait for the previous launch's events (the ones recorded for the watchdog, Note
// [Watching NCCL work]). Then every launch of the group runs after the one issued before it, on every device: the
// order is total and the same on every rank, and the watchdog may watch the newest launch alone (Note [Watching
// launches] in launch_tracker.h). The wait costs one cudaStreamWaitEvent per device, only where the stream changes:
// none between synchronous collectives, one after the last bucket of a backward pass. Deadlock freedom (Note
// [Launching collectives]): the waits are enqueued under the collective launch lock, before the launches, and point
// only to work issued before them (markers, earlier launches of the group).
class NcclCollectives final : public DeviceCollectives {
 public:
  NcclCollectives(HostChannel& channel, Watchdog& watchdog, const std::vector<Device>& devices)
      : watchdog_(watchdog),
        communicators_(create_communicators(channel, watchdog, devices)),
        average_ops_(create_average_ops(*communicators_, channel.size())),
        collective_(communicators_->devices, communicators_->comms) {
    for (int device : communicators_->devices) {
      compute_streams_.push_back(cuda::compute_stream(device));
      comm_streams_.push_back(cuda::comm_stream(device));
    }
    watch_id_ =
        watchdog_.watch("the NCCL collectives", [communicators = communicators_] { return communicators->poll(); });
  }
  ~NcclCollectives() override;
  NcclCollectives(const NcclCollectives&) = delete;
  NcclCollectives& operator=(const NcclCollectives&) = delete;

  void all_reduce(const std::vector<Tensor>& tensors, ReduceOp op) override {
    const size_t count = count_of(tensors.front());
    launch("all_reduce", count, compute_streams_, nullptr, [&](int rank, ncclComm_t comm, cudaStream_t stream) {
      void* const buffer = tensors[rank].mutable_data_ptr();
      TANDEM_NCCL_CHECK(ncclAllReduce(buffer, buffer, count, ncclFloat, nccl_op(op, rank), comm, stream));
    });
  }

  // Note [Deferred join] in collective.h: waits for the markers only, and leaves the join to the caller.
  void start_all_reduce(const std::vector<Tensor>& tensors, const std::vector<StreamMarker>& ready,
                        ReduceOp op) override {
    const size_t count = count_of(tensors.front());
    launch("all_reduce_async", count, comm_streams_, &ready, [&](int rank, ncclComm_t comm, cudaStream_t stream) {
      void* const buffer = tensors[rank].mutable_data_ptr();
      TANDEM_NCCL_CHECK(ncclAllReduce(buffer, buffer, count, ncclFloat, nccl_op(op, rank), comm, stream));
    });
  }

  void broadcast(const std::vector<Tensor>& tensors, int root) override {
    const size_t count = count_of(tensors.front());
    const int root_rank = root * static_cast<int>(tensors.size());  // process root's first device
    launch("broadcast", count, compute_streams_, nullptr, [&](int rank, ncclComm_t comm, cudaStream_t stream) {
      void* const buffer = tensors[rank].mutable_data_ptr();
      TANDEM_NCCL_CHECK(ncclBroadcast(buffer, buffer, count, ncclFloat, root_rank, comm, stream));
    });
  }

  void all_gather(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs) override {
    const size_t count = count_of(inputs.front());
    launch("all_gather", count, compute_streams_, nullptr, [&](int rank, ncclComm_t comm, cudaStream_t stream) {
      TANDEM_NCCL_CHECK(
          ncclAllGather(inputs[rank].data_ptr(), outputs[rank].mutable_data_ptr(), count, ncclFloat, comm, stream));
    });
  }

  void reduce_scatter(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs, ReduceOp op) override {
    const size_t count = count_of(outputs.front());
    launch("reduce_scatter", count_of(inputs.front()), compute_streams_, nullptr,
           [&](int rank, ncclComm_t comm, cudaStream_t stream) {
             TANDEM_NCCL_CHECK(ncclReduceScatter(inputs[rank].data_ptr(), outputs[rank].mutable_data_ptr(), count,
                                                 ncclFloat, nccl_op(op, rank), comm, stream));
           });
  }

  void synchronize() override {
    Armed armed(watchdog_, "synchronize: waiting for the work issued on this process's GPUs");
    for (int device : communicators_->devices) cuda::synchronize(device);
  }

  // Note [Collectives inside a graph capture]: a replay is published like a collective on the compute streams, so
  // the next launch on other streams waits for it (Note [Group collective streams]).
  void watch_issued(const char* name) override {
    cuda::CollectiveLaunchLock lock;
    TANDEM_CHECK(
        !capture_of(compute_streams_), "comm::ProcessGroup::watch_replay: the compute streams of this ",
        "process's GPUs are being captured, but expected the call after a graph's launch, outside any capture");
    Tracker& tracker = communicators_->tracker;
    const DeviceEvents& events = tracker.next().markers;
    for (size_t r = 0; r < compute_streams_.size(); ++r) {
      TANDEM_CUDA_CHECK(cudaEventRecord(events[r], compute_streams_[r]));
    }
    previous_ = &tracker.publish(name, 0);
    previous_streams_ = &compute_streams_;
  }

  void abort() noexcept override;

 private:
  // Marks a launch as inside NCCL's host calls for its scope (Note [Watching NCCL's host calls]), also when one of
  // them throws.
  class Issuing {
   public:
    Issuing(Communicators& communicators, const char* name, uint64_t number, uint64_t bytes)
        : communicators_(communicators) {
      communicators_.issuing_name.store(name, std::memory_order_relaxed);
      communicators_.issuing_number.store(number, std::memory_order_relaxed);
      communicators_.issuing_bytes.store(bytes, std::memory_order_relaxed);
      communicators_.issuing_since.store(Watchdog::Clock::now().time_since_epoch().count(), std::memory_order_release);
    }
    ~Issuing() { communicators_.issuing_since.store(0, std::memory_order_release); }
    Issuing(const Issuing&) = delete;
    Issuing& operator=(const Issuing&) = delete;

   private:
    Communicators& communicators_;
  };

  // One collective on `streams` (one per local rank), with issue(local rank, communicator, stream) for each local
  // rank inside one NCCL group: each stream first waits for ready[rank] when given, and for the previous launch when
  // it ran on other streams (Note [Group collective streams]); then the launch's events are recorded behind it and
  // it is published to the watchdog (Note [Watching NCCL work]); streams being captured take launch_captured's way
  // instead (Note [Collectives inside a graph capture]). Everything happens under the collective launch lock, which
  // also serializes the tracker's launching side. Nothing here allocates device memory.
  template <typename Issue>
  void launch(const char* name, size_t count, const std::vector<cudaStream_t>& streams,
              const std::vector<StreamMarker>* ready, Issue&& issue) {
    cuda::CollectiveLaunchLock lock;
    if (const std::optional<unsigned long long> capture = capture_of(streams)) {
      launch_captured(lock, *capture, name, count, streams, ready, issue);
      return;
    }
    Tracker& tracker = communicators_->tracker;
    const DeviceEvents& events = tracker.next().markers;  // may create events (no device memory)
    for (size_t r = 0; r < streams.size(); ++r) {
      if (ready != nullptr) TANDEM_CUDA_CHECK(cudaStreamWaitEvent(streams[r], cuda::marker_event((*ready)[r]), 0));
      if (previous_ != nullptr && previous_streams_ != &streams) {
        TANDEM_CUDA_CHECK(cudaStreamWaitEvent(streams[r], previous_->markers[r], 0));
      }
    }
    issue_all(lock, name, count, streams, issue);
    for (size_t r = 0; r < streams.size(); ++r) TANDEM_CUDA_CHECK(cudaEventRecord(events[r], streams[r]));
    previous_ = &tracker.publish(name, count * sizeof(float));
    previous_streams_ = &streams;
  }

  // launch() for streams in the capture `capture` (Note [Collectives inside a graph capture]): the same waits and
  // NCCL calls, ordered after the previous launch of the same capture by capture_events_, and not published.
  template <typename Issue>
  void launch_captured(const cuda::CollectiveLaunchLock& lock, unsigned long long capture, const char* name,
                       size_t count, const std::vector<cudaStream_t>& streams, const std::vector<StreamMarker>* ready,
                       Issue& issue) {
    const bool follow = captured_previous_streams_ != nullptr && captured_previous_capture_ == capture &&
                        captured_previous_streams_ != &streams;
    for (size_t r = 0; r < streams.size(); ++r) {
      if (ready != nullptr) TANDEM_CUDA_CHECK(cudaStreamWaitEvent(streams[r], cuda::marker_event((*ready)[r]), 0));
      if (follow) TANDEM_CUDA_CHECK(cudaStreamWaitEvent(streams[r], capture_events_[r], 0));
    }
    issue_all(lock, name, count, streams, issue);
    for (size_t r = 0; r < streams.size(); ++r) TANDEM_CUDA_CHECK(cudaEventRecord(capture_events_[r], streams[r]));
    captured_previous_capture_ = capture;
    captured_previous_streams_ = &streams;
  }

  // The NCCL calls of one launch, issue(local rank, communicator, stream) for each local rank, marked as issuing
  // while they run (Note [Watching NCCL's host calls]) as the group's next launch.
  template <typename Issue>
  void issue_all(const cuda::CollectiveLaunchLock& lock, const char* name, size_t count,
                 const std::vector<cudaStream_t>& streams, Issue& issue) {
    Issuing issuing(*communicators_, name, communicators_->tracker.published() + 1, count * sizeof(float));
    collective_.launch_one(lock, streams,
                           [&](int rank, size_t, ncclComm_t comm, cudaStream_t stream) { issue(rank, comm, stream); });
  }

  ncclRedOp_t nccl_op(ReduceOp op, int rank) const {
    return op == ReduceOp::Average && !average_ops_.empty() ? average_ops_[static_cast<size_t>(rank)] : ncclSum;
  }

  Watchdog& watchdog_;
  std::shared_ptr<Communicators> communicators_;  // shared with the watchdog's device watch
  std::vector<ncclRedOp_t> average_ops_;          // one per local rank; empty with one process
  nccl::Collective collective_;                   // over communicators_->comms
  std::vector<cudaStream_t> compute_streams_;     // of each local rank's device
  std::vector<cudaStream_t> comm_streams_;        // likewise
  // The last launch published and the streams it ran on (compute_streams_ or comm_streams_); its events keep their
  // record until the next launch records them again, after its waits.
  const Tracker::Launch* previous_ = nullptr;
  const std::vector<cudaStream_t>* previous_streams_ = nullptr;
  // The same for the launches recorded into graph captures (Note [Collectives inside a graph capture]): the events
  // recorded behind the last one, the capture it was part of and its streams (null before the first).
  DeviceEvents capture_events_{communicators_->devices};
  unsigned long long captured_previous_capture_ = 0;
  const std::vector<cudaStream_t>* captured_previous_streams_ = nullptr;
  uint64_t watch_id_ = 0;
};

// Note [Process group communicators are destroyed]: unlike the single-process communicators (Note [Communicators are
// never destroyed] in communicators.cpp), a group's communicator belongs to the group, whose end is a point of the
// program (ProcessGroup's destructor), not a static destructor racing the CUDA runtime's teardown; and programs and
// tests create groups one after another, each of which would otherwise keep its GPU buffers, proxy threads and
// sockets to the end of the process. Every process destroys its group at the same point of the program, which matters:
// NCCL's teardown may wait for the communicator's other ranks. So the destructor waits for the local GPUs, then
// destroys the communicators, both bounded by the watchdog (which must still live). CUDA graphs that captured the
// group's collectives must be destroyed before the group. After abort(), ncclCommAbort has released the
// communicators and nothing is destroyed again.
NcclCollectives::~NcclCollectives() {
  static constinit tandem::detail::ReportOnce failures("destroying the NCCL communicator of a process group");
  failures.run([&] {
    watchdog_.disarm(watch_id_);  // no poll touches the communicators from here on
    if (!communicators_->live()) return;
    Armed armed(watchdog_, "destroying the NCCL communicator");
    for (int device : communicators_->devices) cuda::synchronize(device);
    if (!communicators_->leave_live(Communicators::Phase::Destroyed)) return;
    cuda::CollectiveLaunchExclusion exclusion;  // NCCL frees device memory (Note [Launching collectives])
    for (ncclComm_t comm : communicators_->comms) TANDEM_NCCL_CHECK(ncclCommDestroy(comm));
  });
}

// Note [Bounded abort]: abort() runs on the watchdog's failure path, which must end the process. ncclCommAbort stops
// the kernels of the communicator, but recent NCCL versions may still wait in it for the communicator's other local
// ranks, or for a host thread that is stuck inside NCCL. So the communicators are aborted on a helper thread that
// shares their state, and abort() waits for it at most kAbortWait: after that the host channel's abort ends the
// process anyway.
void NcclCollectives::abort() noexcept {
  static constinit tandem::detail::ReportOnce failures("aborting the NCCL communicator of a process group");
  failures.run([&] {
    if (!communicators_->leave_live(Communicators::Phase::Aborted)) return;
    auto aborted = std::make_shared<std::promise<void>>();
    std::future<void> finished = aborted->get_future();
    std::thread([communicators = communicators_, aborted] {
      for (ncclComm_t comm : communicators->comms) {
        const ncclResult_t status = ncclCommAbort(comm);
        if (status != ncclSuccess) {
          failures.report(tandem::detail::concat("ncclCommAbort failed: ", ncclGetErrorString(status)));
        }
      }
      aborted->set_value();
    }).detach();
    if (finished.wait_for(kAbortWait) != std::future_status::ready) {
      failures.report(tandem::detail::concat("ncclCommAbort did not return within ", kAbortWait.count(),
                                             " s; the process ends without it"));
    }
  });
}

}  // namespace

std::unique_ptr<DeviceCollectives> make_nccl_collectives(HostChannel& channel, Watchdog& watchdog,
                                                         const std::vector<Device>& devices) {
  return std::make_unique<NcclCollectives>(channel, watchdog, devices);
}

}  // namespace tandem::comm::detail
