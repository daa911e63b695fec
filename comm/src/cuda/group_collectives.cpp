// The device collectives of a process group on CUDA devices (device_collectives.h): one NCCL communicator over every
// GPU of every process. Each call is one NCCL group on the local devices' communication streams, ordered against their
// compute streams as the single-process backend's collectives are (Note [Comm stream ordering], Note [Deferred join]
// in collective.h), and watched by the group's watchdog until it completes (Note [Watching NCCL work]).

#include <nccl.h>

#include <chrono>
#include <future>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "collective.h"
#include "nccl_check.h"
#include "process/device_collectives.h"
#include "tandem/core/cuda/context.h"
#include "tandem/core/error.h"

namespace tandem::comm::detail {
namespace {

// Note [Watching NCCL work]: a collective issued on the GPUs returns at once, and its kernels then wait on the device
// for their peers, forever if a peer never comes (Note [A distributed job never hangs]). So after each launch an event
// is recorded on every local communication stream, and a device entry of the group's watchdog polls them: the entry
// is done once every event has completed (cudaEventQuery), and it fails, with NCCL's message, once
// ncclCommGetAsyncError reports an error on any local communicator (a peer that died, a broken connection); an entry
// still pending at its deadline ends the job too. The events come from a pool and go back to it when the watchdog
// drops the entry, so no event is created per call after warm-up. The entries share the communicators' state with
// the collectives object: an entry polled after the communicators were destroyed or aborted finds them gone and
// reports itself done instead of touching released handles.
class Communicators {
 public:
  enum class Phase { Live, Destroyed, Aborted };

  Communicators() = default;
  ~Communicators();  // destroys the pooled events; the communicators are released by destroy or abort
  Communicators(const Communicators&) = delete;
  Communicators& operator=(const Communicators&) = delete;

  std::vector<int> devices;       // local rank i drives CUDA device devices[i]
  std::vector<ncclComm_t> comms;  // the communicator of local rank i
  int first_rank = 0;             // the global rank of local rank 0

  // Moves from Live to `next`; false when another caller already left Live (then releasing the communicators is not
  // this caller's job).
  bool leave_live(Phase next);
  bool live();

  // The watchdog's poll of one launch: whether `events` (one per local rank) have completed. Errors: an asynchronous
  // NCCL error on a local communicator; a CUDA error of the events.
  bool complete(const std::vector<cudaEvent_t>& events);

  // One event per local rank, on its device, from the pool (created when it is empty).
  std::vector<cudaEvent_t> take_events();
  void give_back(std::vector<cudaEvent_t> events) noexcept;

 private:
  std::mutex mutex_;  // guards phase_ and free_events_
  Phase phase_ = Phase::Live;
  std::vector<std::vector<cudaEvent_t>> free_events_;
};

Communicators::~Communicators() {
  static constinit tandem::detail::ReportOnce failures("destroying the events of a process group's collectives");
  for (const std::vector<cudaEvent_t>& events : free_events_) {
    for (cudaEvent_t event : events) failures.run([&] { TANDEM_CUDA_CHECK(cudaEventDestroy(event)); });
  }
}

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

bool Communicators::complete(const std::vector<cudaEvent_t>& events) {
  std::lock_guard<std::mutex> lock(mutex_);  // keeps destroy and abort from releasing the communicators meanwhile
  if (phase_ != Phase::Live) return true;
  for (size_t i = 0; i < comms.size(); ++i) {
    ncclResult_t async = ncclSuccess;
    TANDEM_NCCL_CHECK(ncclCommGetAsyncError(comms[i], &async));
    if (async != ncclSuccess && async != ncclInProgress) {
      TANDEM_FAIL("comm::ProcessGroup: NCCL reported an asynchronous error on global rank ", first_rank + i,
                  " (cuda:", devices[i], "): ", ncclGetErrorString(async), " (", ncclGetLastError(comms[i]), ")");
    }
  }
  for (cudaEvent_t event : events) {
    const cudaError_t status = cudaEventQuery(event);
    if (status == cudaErrorNotReady) return false;
    TANDEM_CUDA_CHECK(status);
  }
  return true;
}

std::vector<cudaEvent_t> Communicators::take_events() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!free_events_.empty()) {
      std::vector<cudaEvent_t> events = std::move(free_events_.back());
      free_events_.pop_back();
      return events;
    }
  }
  std::vector<cudaEvent_t> events(devices.size(), nullptr);
  for (size_t i = 0; i < devices.size(); ++i) {
    cuda::DeviceGuard guard(devices[i]);  // an event belongs to the device current at its creation
    TANDEM_CUDA_CHECK(cudaEventCreateWithFlags(&events[i], cudaEventDisableTiming));
  }
  return events;
}

void Communicators::give_back(std::vector<cudaEvent_t> events) noexcept {
  static constinit tandem::detail::ReportOnce failures("returning the events of a process group's collective");
  failures.run([&] {
    std::lock_guard<std::mutex> lock(mutex_);
    free_events_.push_back(std::move(events));
  });
}

// The events of one launch, going back to the pool when the last holder (the launch, then its watchdog entry) drops
// them.
struct InFlight {
  explicit InFlight(std::shared_ptr<Communicators> owner_)
      : owner(std::move(owner_)), events(owner->take_events()) {}
  ~InFlight() { owner->give_back(std::move(events)); }
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;

  std::shared_ptr<Communicators> owner;
  std::vector<cudaEvent_t> events;
};

// Creates the communicator over channel.size() * devices.size() GPUs: local device i is global rank
// channel.rank() * devices.size() + i. A communicator whose creation failed is left alone: the job ends with the error.
std::shared_ptr<Communicators> create_communicators(HostChannel& channel, Watchdog& watchdog,
                                                    const std::vector<Device>& devices) {
  auto created = std::make_shared<Communicators>();
  const int local_ranks = static_cast<int>(devices.size());
  const int ranks = channel.size() * local_ranks;
  created->first_rank = channel.rank() * local_ranks;
  for (const Device& device : devices) {
    TANDEM_INTERNAL_ASSERT(device.is_cuda(), "make_nccl_collectives: got ", device, " but expected CUDA devices");
    created->devices.push_back(device.index());
  }

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

size_t count_of(const Tensor& t) { return static_cast<size_t>(t.numel()); }

// How long abort() waits for ncclCommAbort (Note [Bounded abort]).
constexpr std::chrono::seconds kAbortWait{10};

class NcclCollectives final : public DeviceCollectives {
 public:
  NcclCollectives(HostChannel& channel, Watchdog& watchdog, const std::vector<Device>& devices)
      : watchdog_(watchdog),
        communicators_(create_communicators(channel, watchdog, devices)),
        average_ops_(create_average_ops(*communicators_, channel.size())),
        collective_(communicators_->devices, communicators_->comms) {}
  ~NcclCollectives() override;
  NcclCollectives(const NcclCollectives&) = delete;
  NcclCollectives& operator=(const NcclCollectives&) = delete;

  void all_reduce(const std::vector<Tensor>& tensors, ReduceOp op) override {
    const size_t count = count_of(tensors.front());
    launch("all_reduce", count, [&](int rank, ncclComm_t comm, cudaStream_t stream) {
      void* const buffer = tensors[rank].mutable_data_ptr();
      TANDEM_NCCL_CHECK(ncclAllReduce(buffer, buffer, count, ncclFloat, nccl_op(op, rank), comm, stream));
    });
  }

  // Note [Deferred join] in collective.h: waits for the markers only, and leaves the join to the caller.
  void start_all_reduce(const std::vector<Tensor>& tensors, const std::vector<StreamMarker>& ready,
                        ReduceOp op) override {
    const size_t count = count_of(tensors.front());
    std::vector<cudaEvent_t> ready_events(ready.size());
    for (size_t i = 0; i < ready.size(); ++i) ready_events[i] = cuda::marker_event(ready[i]);
    auto in_flight = std::make_shared<InFlight>(communicators_);  // before the launch: nothing allocates during it
    collective_.run_after(ready_events, [&](int rank, size_t, ncclComm_t comm, cudaStream_t stream) {
      void* const buffer = tensors[rank].mutable_data_ptr();
      TANDEM_NCCL_CHECK(ncclAllReduce(buffer, buffer, count, ncclFloat, nccl_op(op, rank), comm, stream));
    });
    watch(std::move(in_flight), "all_reduce_async", count);
  }

  void broadcast(const std::vector<Tensor>& tensors, int root) override {
    const size_t count = count_of(tensors.front());
    const int root_rank = root * static_cast<int>(tensors.size());  // process root's first device
    launch("broadcast", count, [&](int rank, ncclComm_t comm, cudaStream_t stream) {
      void* const buffer = tensors[rank].mutable_data_ptr();
      TANDEM_NCCL_CHECK(ncclBroadcast(buffer, buffer, count, ncclFloat, root_rank, comm, stream));
    });
  }

  void all_gather(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs) override {
    const size_t count = count_of(inputs.front());
    launch("all_gather", count, [&](int rank, ncclComm_t comm, cudaStream_t stream) {
      TANDEM_NCCL_CHECK(ncclAllGather(inputs[rank].data_ptr(), outputs[rank].mutable_data_ptr(), count, ncclFloat,
                                      comm, stream));
    });
  }

  void reduce_scatter(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs, ReduceOp op) override {
    const size_t count = count_of(outputs.front());
    launch("reduce_scatter", count_of(inputs.front()), [&](int rank, ncclComm_t comm, cudaStream_t stream) {
      TANDEM_NCCL_CHECK(ncclReduceScatter(inputs[rank].data_ptr(), outputs[rank].mutable_data_ptr(), count, ncclFloat,
                                          nccl_op(op, rank), comm, stream));
    });
  }

  void synchronize() override {
    Armed armed(watchdog_, "synchronize: waiting for the work issued on this process's GPUs");
    for (int device : communicators_->devices) cuda::synchronize(device);
  }

  void abort() noexcept override;

 private:
  // One collective as Collective::run orders it (Note [Comm stream ordering]), with issue(local rank, communicator,
  // communication stream) for each local rank inside one NCCL group, then watched (Note [Watching NCCL work]).
  template <typename Issue>
  void launch(const char* name, size_t count, Issue&& issue) {
    auto in_flight = std::make_shared<InFlight>(communicators_);  // before the launch: nothing allocates during it
    collective_.run(1, [&](int rank, size_t, ncclComm_t comm, cudaStream_t stream) { issue(rank, comm, stream); });
    watch(std::move(in_flight), name, count);
  }

  // Records the launch's events behind it on the communication streams and arms a device entry that polls them.
  void watch(std::shared_ptr<InFlight> in_flight, const char* name, size_t count) {
    const std::vector<int>& devices = communicators_->devices;
    for (size_t i = 0; i < devices.size(); ++i) {
      TANDEM_CUDA_CHECK(cudaEventRecord(in_flight->events[i], cuda::comm_stream(devices[i])));
    }
    std::string what = name;
    what += " #";
    what += std::to_string(++issued_);
    what += " of ";
    what += std::to_string(count * sizeof(float));
    what += " bytes";
    watchdog_.arm(std::move(what), [in_flight] { return in_flight->owner->complete(in_flight->events); });
  }

  ncclRedOp_t nccl_op(ReduceOp op, int rank) const {
    return op == ReduceOp::Average && !average_ops_.empty() ? average_ops_[static_cast<size_t>(rank)] : ncclSum;
  }

  Watchdog& watchdog_;
  std::shared_ptr<Communicators> communicators_;  // shared with the watchdog's entries
  std::vector<ncclRedOp_t> average_ops_;          // one per local rank; empty with one process
  nccl::Collective collective_;                   // over communicators_->comms
  uint64_t issued_ = 0;                           // collectives issued so far, to name them
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
