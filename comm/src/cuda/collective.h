#pragma once
// One NCCL collective over several GPUs driven by this process: the participating devices in rank order, their
// cached communicators, and the event ordering against the devices' compute streams.

#include <nccl.h>

#include <mutex>
#include <vector>

#include "nccl_check.h"
#include "tandem/core/cuda/context.h"
#include "tandem/core/tensor.h"

namespace tandem::comm::nccl {

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

// NCCL communicators may not be used by two host threads at once, and the operations of one collective must reach
// every rank in the same order, so collectives are issued one at a time.
std::mutex& issue_mutex();

class Collective {
 public:
  // The devices of `tensors` (one tensor per device, all CUDA) become the ranks, in ascending device order.
  explicit Collective(const std::vector<Tensor>& tensors);

  bool has(const Device& device) const;
  int rank_of(const Device& device) const;
  // The data of `tensors` (one per participating device) indexed by rank.
  std::vector<void*> by_rank(const std::vector<Tensor>& tensors) const;

  // Calls issue(rank, communicator, stream) for every rank inside one NCCL group.
  //
  // Note [Comm stream ordering]: the collective runs on each device's communication stream, while the tensors it
  // reads were produced (and its outputs allocated) on the devices' compute streams. Before the group, each comm
  // stream waits for everything issued so far on its device's compute stream, so NCCL reads finished values and
  // writes memory that no earlier kernel still uses. After the group, each compute stream waits for its comm
  // stream, so every later consumer of the results, and every later reuse of the input or output blocks by the
  // caching allocator (which orders reuse on the compute stream, Note [Stream-ordered reuse]), comes after the
  // collective. Both waits are device-side events: the host never blocks. Nothing here allocates or frees device
  // memory between the first wait and the end of the group (a cudaFree while NCCL kernels are being enqueued can
  // deadlock), so callers allocate every buffer before calling run.
  template <typename Issue>
  void run(Issue&& issue) const {
    std::lock_guard<std::mutex> lock(issue_mutex());
    for (int d : devices_) cuda::stream_wait(cuda::comm_stream(d), cuda::compute_stream(d), d);
    Group group;
    for (size_t r = 0; r < devices_.size(); ++r) {
      issue(static_cast<int>(r), (*comms_)[r], cuda::comm_stream(devices_[r]));
    }
    group.end();
    for (int d : devices_) cuda::stream_wait(cuda::compute_stream(d), cuda::comm_stream(d), d);
  }

 private:
  std::vector<int> devices_;
  const std::vector<ncclComm_t>* comms_ = nullptr;
};

}  // namespace tandem::comm::nccl
