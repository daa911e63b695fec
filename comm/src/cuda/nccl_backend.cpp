// The NCCL backend: one process drives every GPU; each collective is one NCCL group over the participating
// devices, issued on their communication streams.

#include <algorithm>
#include <mutex>

#include "comm_backend.h"
#include "communicators.h"
#include "nccl_check.h"
#include "tandem/core/cuda/context.h"

namespace tandem::comm::detail {
namespace {

// Closes an open NCCL group even when issuing one of its operations threw, so the thread's group depth stays
// balanced.
class NcclGroup {
 public:
  NcclGroup() { TANDEM_NCCL_CHECK(ncclGroupStart()); }
  ~NcclGroup() {
    if (open_) ncclGroupEnd();
  }
  NcclGroup(const NcclGroup&) = delete;
  NcclGroup& operator=(const NcclGroup&) = delete;
  void end() {
    open_ = false;
    TANDEM_NCCL_CHECK(ncclGroupEnd());
  }

 private:
  bool open_ = true;
};

// NCCL communicators may not be used by two host threads at once, and the operations of one collective must reach
// every rank in the same order, so collectives are issued one at a time.
std::mutex& issue_mutex() {
  static std::mutex mutex;
  return mutex;
}

// The devices of one collective in rank order (ascending CUDA index) and their cached communicators.
class Collective {
 public:
  explicit Collective(const std::vector<Tensor>& tensors) {
    for (const Tensor& t : tensors) devices_.push_back(t.device().index());
    std::sort(devices_.begin(), devices_.end());
    comms_ = &nccl::communicators(devices_);
  }

  bool has(const Device& device) const {
    return device.is_cuda() && std::binary_search(devices_.begin(), devices_.end(), device.index());
  }
  int rank_of(const Device& device) const {
    return static_cast<int>(std::lower_bound(devices_.begin(), devices_.end(), device.index()) - devices_.begin());
  }
  // The data of `tensors` (one per participating device) indexed by rank.
  std::vector<void*> by_rank(const std::vector<Tensor>& tensors) const {
    std::vector<void*> buffers(devices_.size());
    for (const Tensor& t : tensors) buffers[static_cast<size_t>(rank_of(t.device()))] = t.mutable_data_ptr();
    return buffers;
  }

  // Calls issue(rank, communicator, stream) for every rank inside one NCCL group.
  //
  // Note [Comm stream ordering]: the collective runs on each device's communication stream, while the tensors it
  // reads were produced (and its outputs allocated) on the devices' compute streams. Before the group, each comm
  // stream waits for everything issued so far on its device's compute stream, so NCCL reads finished values and
  // writes memory that no earlier kernel still uses. After the group, each compute stream waits for its comm
  // stream, so every later consumer of the results, and every later reuse of the input or output blocks by the
  // caching allocator (which orders reuse on the compute stream), comes after the collective. Both waits are
  // device-side events: the host never blocks. Nothing here allocates or frees device memory between the first
  // wait and the end of the group (a cudaFree while NCCL kernels are being enqueued can deadlock).
  template <typename Issue>
  void run(Issue&& issue) const {
    std::lock_guard<std::mutex> lock(issue_mutex());
    for (int d : devices_) {
      cuda::DeviceGuard guard(d);
      cuda::stream_wait(cuda::comm_stream(d), cuda::compute_stream(d), d);
    }
    NcclGroup group;
    for (size_t r = 0; r < devices_.size(); ++r) {
      issue(static_cast<int>(r), (*comms_)[r], cuda::comm_stream(devices_[r]));
    }
    group.end();
    for (int d : devices_) {
      cuda::DeviceGuard guard(d);
      cuda::stream_wait(cuda::compute_stream(d), cuda::comm_stream(d), d);
    }
  }

 private:
  std::vector<int> devices_;
  const std::vector<ncclComm_t>* comms_ = nullptr;
};

size_t count_of(const Tensor& t) { return static_cast<size_t>(t.numel()); }

class NcclBackend final : public Backend {
 public:
  void broadcast(const Tensor& src, const std::vector<Tensor>& dsts) override {
    std::vector<Tensor> tensors = dsts;
    tensors.push_back(src);
    const Collective collective(tensors);
    const std::vector<void*> buffers = collective.by_rank(tensors);
    const int root = collective.rank_of(src.device());
    const size_t count = count_of(src);
    collective.run([&](int rank, ncclComm_t comm, cudaStream_t stream) {
      // In place on the root (its send and receive buffers are the same), so the root copies nothing.
      TANDEM_NCCL_CHECK(ncclBroadcast(buffers[rank], buffers[rank], count, ncclFloat, root, comm, stream));
    });
  }

  // tandem: a destination that holds no input (another GPU, or the host) receives the sum through a temporary on
  // the first input's device, since every rank of an NCCL reduce must contribute an input.
  void reduce(const std::vector<Tensor>& inputs, const Tensor& output) override {
    const Collective collective(inputs);
    const bool direct = collective.has(output.device());
    const Tensor target = direct ? output : Tensor::empty(output.shape(), inputs[0].device());
    const std::vector<void*> buffers = collective.by_rank(inputs);
    const int root = collective.rank_of(target.device());
    void* const result = target.mutable_data_ptr();
    const size_t count = count_of(target);
    collective.run([&](int rank, ncclComm_t comm, cudaStream_t stream) {
      TANDEM_NCCL_CHECK(ncclReduce(buffers[rank], rank == root ? result : nullptr, count, ncclFloat, ncclSum, root,
                                   comm, stream));
    });
    if (!direct) Tensor(output).copy_(target);
  }

  void all_reduce(const std::vector<Tensor>& tensors) override {
    const Collective collective(tensors);
    const std::vector<void*> buffers = collective.by_rank(tensors);
    const size_t count = count_of(tensors[0]);
    collective.run([&](int rank, ncclComm_t comm, cudaStream_t stream) {
      TANDEM_NCCL_CHECK(ncclAllReduce(buffers[rank], buffers[rank], count, ncclFloat, ncclSum, comm, stream));
    });
  }
};

}  // namespace

Backend& nccl_backend() {
  static NcclBackend backend;
  return backend;
}

}  // namespace tandem::comm::detail
