#pragma once
// One NCCL collective over the GPUs that this process drives: the participating devices in local rank order, their
// communicators (the cached ones of communicators.h, or a process group's), and the streams the collective is issued
// on.

#include <nccl.h>

#include <algorithm>
#include <vector>

#include "launch_lanes.h"
#include "nccl_check.h"
#include "tandem/core/cuda/context.h"
#include "tandem/core/tensor.h"

namespace tandem::comm::nccl {

// A tensor's element count as NCCL takes it.
inline size_t count_of(const Tensor& t) { return static_cast<size_t>(t.numel()); }

// Closes an open NCCL group even when issuing one of its operations threw, so the thread's group depth stays
// balanced.
class Group {
 public:
  Group() { TANDEM_NCCL_CHECK(ncclGroupStart()); }
  ~Group() {
    if (open_) ncclGroupEnd();
  }
  Group(const Group&) = delete;
  Group& operator=(const Group&) = delete;
  void end() {
    open_ = false;
    TANDEM_NCCL_CHECK(ncclGroupEnd());
  }

 private:
  bool open_ = true;
};

class Collective {
 public:
  // NCCL's limit on the operations between ncclGroupStart and ncclGroupEnd (one per rank and tensor).
  static constexpr size_t kMaxGroupOperations = 2048;

  // The participants: distinct CUDA devices, which become the ranks in ascending device order, on the cached
  // communicators of that device set (communicators.h).
  explicit Collective(const std::vector<Device>& devices);
  // The local part of a communicator created elsewhere (a process group's, spanning other processes too): local rank
  // r is device index devices[r] (distinct, any order) with comms[r], which must outlive the Collective.
  Collective(std::vector<int> devices, const std::vector<ncclComm_t>& comms);

  size_t size() const { return devices_.size(); }
  bool has(const Device& device) const;
  int rank_of(const Device& device) const;

  // Calls issue(rank, i, communicator, stream) for every rank and every i < count, with each device's compute
  // stream, inside NCCL groups: every rank's operations in order of i, so that every communicator sees them in the
  // same order, and no more than kMaxGroupOperations calls per group. NCCL aggregates the operations of a group
  // into one kernel launch per device. The calls are made while holding a CollectiveLaunchLock (Note [Launching
  // collectives]), so collectives are issued one at a time: NCCL communicators may not be used by two host threads
  // at once, and every rank must see the same order.
  //
  // Note [Comm stream ordering]: a synchronous collective of the single-process backend runs on the participating
  // devices' compute streams, where its inputs were produced, where its results are consumed, and where the caching
  // allocator orders the reuse of its input and output blocks (Note [Stream-ordered reuse]). So it needs no event at
  // all, exactly as a raw NCCL call on the caller's stream: the stream order puts it after its producers and before
  // its consumers, and nothing that runs elsewhere touches its buffers. The one wait left is Note [One NCCL order per
  // device] (launch_lanes.h): a device whose previous launch was a started all-reduce on its communication stream
  // first makes its compute stream wait for that stream (once, at the change of stream). It is enqueued under the
  // lock, before the launches. Nothing here allocates or frees device memory, so callers allocate every buffer before
  // calling run: the caching allocator asserts it (Note [No device allocation during a collective launch]).
  template <typename Issue>
  void run(size_t count, Issue&& issue) const {
    cuda::CollectiveLaunchLock lock;
    for (int d : devices_) enter_lane(lock, d, Lane::Compute);
    launch(
        count, [](size_t, int device) { return cuda::compute_stream(device); }, issue);
  }

  // As run, but on the devices' communication streams, each of which first waits for ready[r] (an event recorded
  // on the compute stream of rank r's device), and without joining anything back.
  //
  // Note [Deferred join]: this is how an all-reduce overlaps the rest of a backward pass. Its communication stream
  // waits for one marker per device (the point after which its inputs are final), not for everything issued on the
  // compute streams, and nothing waits for it until AllReduceWork::wait() makes each compute stream wait for its
  // communication stream. In between, the compute streams run on, so two rules hold until the join: no work issued
  // after the marker may read or write the tensors, and the tensors' blocks must not be released (the caching
  // allocator would hand them to compute-stream work that does not wait for the collective, Note [Stream-ordered
  // reuse]); AllReduceWork holds the tensors, and the gradient buffers of ReplicatedModule live as long as the
  // module anyway. A device whose previous launch ran on its compute stream (Note [One NCCL order per device]) makes
  // its communication stream wait for everything issued on the compute stream so far instead, which includes the
  // marker (recorded there before this call), so the marker's own wait is left out then. Deadlock freedom (Note
  // [Launching collectives]): the waits are enqueued under the lock together with the launches, and the kernels
  // depend only on work issued before them; no compute stream waits for a communication stream until the join (or
  // the next synchronous collective's change of stream), which comes after every launch of the collective.
  template <typename Issue>
  void run_after(const std::vector<cudaEvent_t>& ready, Issue&& issue) const {
    cuda::CollectiveLaunchLock lock;
    for (size_t r = 0; r < devices_.size(); ++r) {
      if (!enter_lane(lock, devices_[r], Lane::Comm)) {
        TANDEM_CUDA_CHECK(cudaStreamWaitEvent(cuda::comm_stream(devices_[r]), ready[r], 0));
      }
    }
    launch(
        1, [](size_t, int device) { return cuda::comm_stream(device); }, issue);
  }

  // One operation per local rank, issue(rank, 0, communicator, streams[rank]), on streams that the caller orders
  // itself (a process group's, Note [Group collective streams] in group_collectives.cpp): no stream waits here. One
  // NCCL group, or the single call alone when there is one local rank (which NCCL treats the same). The caller holds
  // `lock` for this and the waits and records around it.
  template <typename Issue>
  void launch_one(const cuda::CollectiveLaunchLock& lock, const std::vector<cudaStream_t>& streams,
                  Issue&& issue) const {
    (void)lock;
    if (devices_.size() == 1) {
      issue(0, size_t{0}, (*comms_)[0], streams[0]);
      return;
    }
    launch(
        1, [&](size_t rank, int) { return streams[rank]; }, issue);
  }

 private:
  // Issues the groups of run and run_after on stream_of(rank, device); the caller holds the CollectiveLaunchLock.
  template <typename StreamOf, typename Issue>
  void launch(size_t count, StreamOf&& stream_of, Issue& issue) const {
    const size_t per_group = std::max<size_t>(1, kMaxGroupOperations / devices_.size());
    for (size_t first = 0; first < count; first += per_group) {
      const size_t last = std::min(count, first + per_group);
      Group group;
      for (size_t r = 0; r < devices_.size(); ++r) {
        const cudaStream_t stream = stream_of(r, devices_[r]);
        for (size_t i = first; i < last; ++i) issue(static_cast<int>(r), i, (*comms_)[r], stream);
      }
      group.end();
    }
  }

  std::vector<int> devices_;
  const std::vector<ncclComm_t>* comms_ = nullptr;
};

}  // namespace tandem::comm::nccl
