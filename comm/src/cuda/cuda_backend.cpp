// The CUDA backend: one process drives every GPU. Broadcast, reduce and all-reduce are NCCL collectives (one NCCL
// group over the participating devices, on their compute streams, with no event waits: Note [Comm stream ordering]
// in collective.h), with one operation per tensor of the lists; a started all-reduce runs on the communication
// streams until it is joined (Note [Deferred join]). Copies are peer copies: small ones on their sources' compute
// streams, larger ones overlapping on the communication streams (Note [Overlapping copies] below).

#include <algorithm>

#include "checks.h"
#include "collective.h"
#include "comm_backend.h"
#include "peer_copies.h"

namespace tandem::comm::detail {
namespace {

using nccl::Collective;
using nccl::count_of;

// One list per device (a collective's lists, pairwise distinct devices).
using Lists = std::vector<const std::vector<Tensor>*>;

std::vector<Device> devices_of(const Lists& lists) {
  std::vector<Device> devices;
  devices.reserve(lists.size());
  for (const std::vector<Tensor>* list : lists) devices.push_back(list->front().device());
  return devices;
}

// `lists` reordered by the rank of their devices in `collective`.
Lists by_rank(const Collective& collective, const Lists& lists) {
  Lists ranked(lists.size());
  for (const std::vector<Tensor>* list : lists) ranked[collective.rank_of(list->front().device())] = list;
  return ranked;
}

class CudaBackend final : public Backend {
 public:
  void broadcast(const std::vector<Tensor>& srcs, const std::vector<std::vector<Tensor>>& dsts) override {
    Lists lists = {&srcs};
    for (const std::vector<Tensor>& list : dsts) lists.push_back(&list);
    const Collective collective(devices_of(lists));
    const Lists ranked = by_rank(collective, lists);
    const int root = collective.rank_of(srcs.front().device());
    collective.run(srcs.size(), [&](int rank, size_t i, ncclComm_t comm, cudaStream_t stream) {
      // In place on the root (its send and receive buffers are the same), so the root copies nothing.
      void* const buffer = (*ranked[rank])[i].mutable_data_ptr();
      TANDEM_NCCL_CHECK(ncclBroadcast(buffer, buffer, count_of(srcs[i]), ncclFloat, root, comm, stream));
    });
  }

  // tandem: a destination that holds no input list (another GPU, or the host) receives the sums through
  // temporaries on the first list's device, since every rank of an NCCL reduce contributes an input.
  void reduce(const std::vector<std::vector<Tensor>>& inputs, const std::vector<Tensor>& outputs) override {
    Lists lists;
    for (const std::vector<Tensor>& list : inputs) lists.push_back(&list);
    const Collective collective(devices_of(lists));
    const bool direct = collective.has(outputs.front().device());
    std::vector<Tensor> targets = outputs;
    if (!direct) {
      for (Tensor& target : targets) target = Tensor::empty(target.shape(), inputs.front().front().device());
    }
    const Lists ranked = by_rank(collective, lists);
    const int root = collective.rank_of(targets.front().device());
    collective.run(targets.size(), [&](int rank, size_t i, ncclComm_t comm, cudaStream_t stream) {
      void* const result = rank == root ? targets[i].mutable_data_ptr() : nullptr;
      TANDEM_NCCL_CHECK(ncclReduce((*ranked[rank])[i].data_ptr(), result, count_of(targets[i]), ncclFloat, ncclSum,
                                   root, comm, stream));
    });
    if (!direct) {
      for (size_t i = 0; i < outputs.size(); ++i) Tensor(outputs[i]).copy_(targets[i]);
    }
  }

  void all_reduce(const std::vector<Tensor>& tensors) override {
    const Collective collective(detail::devices_of(tensors));
    std::vector<void*> buffers(tensors.size());
    for (const Tensor& t : tensors) buffers[collective.rank_of(t.device())] = t.mutable_data_ptr();
    const size_t count = count_of(tensors.front());
    collective.run(1, [&](int rank, size_t, ncclComm_t comm, cudaStream_t stream) {
      TANDEM_NCCL_CHECK(ncclAllReduce(buffers[rank], buffers[rank], count, ncclFloat, ncclSum, comm, stream));
    });
  }

  // See Note [Deferred join] in collective.h.
  void start_all_reduce(const std::vector<Tensor>& tensors, const std::vector<StreamMarker>& ready) override {
    const Collective collective(detail::devices_of(tensors));
    std::vector<void*> buffers(tensors.size());
    std::vector<cudaEvent_t> events(tensors.size());
    for (size_t i = 0; i < tensors.size(); ++i) {
      const int rank = collective.rank_of(tensors[i].device());
      buffers[rank] = tensors[i].mutable_data_ptr();
      events[rank] = cuda::marker_event(ready[i]);
    }
    const size_t count = count_of(tensors.front());
    collective.run_after(events, [&](int rank, size_t, ncclComm_t comm, cudaStream_t stream) {
      TANDEM_NCCL_CHECK(ncclAllReduce(buffers[rank], buffers[rank], count, ncclFloat, ncclSum, comm, stream));
    });
  }

  void join(const std::vector<Tensor>& tensors) override {
    for (const Tensor& t : tensors) {
      const int device = t.device().index();
      cuda::stream_wait(cuda::compute_stream(device), cuda::comm_stream(device), device);
    }
  }

  // Note [Overlapping copies]: core's cross-device copy runs each copy on the destination's compute stream and then
  // makes the source's compute stream wait for it (Note [Cross-device copy ordering]), so a gather's copies (one
  // destination) and a scatter's copies to several GPUs (one source) would run one after another, each with its own
  // pair of waits. Here the copies of one call are ordered together: up to kSourceStreamCopyBytes in all, each copy
  // runs on its source's compute stream with one cross-device wait per pair of devices each way (Note [Small copies
  // on their sources' streams] in peer_copies.h); above it each copy runs on the communication stream of the end it
  // does not share with the others: the source's when every copy has the same destination device (gather), the
  // destination's otherwise (scatter); so they overlap (Note [Comm peer copy ordering]). A destination with gaps
  // between its elements (a slice along an inner dimension) goes through core's staged copy instead.
  void copy(const std::vector<Tensor>& srcs, const std::vector<Tensor>& dsts) override {
    const Device gather_device = dsts[0].device();
    const bool one_destination =
        std::all_of(dsts.begin(), dsts.end(), [&](const Tensor& t) { return t.device() == gather_device; });
    std::vector<Tensor> sources;
    std::vector<Tensor> targets;
    std::vector<int> carriers;
    std::vector<size_t> strided;
    size_t bytes = 0;
    for (size_t i = 0; i < srcs.size(); ++i) {
      if (!dsts[i].is_contiguous()) {
        strided.push_back(i);
        continue;
      }
      sources.push_back(srcs[i].contiguous());
      targets.push_back(dsts[i]);
      carriers.push_back((one_destination ? srcs[i] : dsts[i]).device().index());
      bytes += static_cast<size_t>(srcs[i].numel()) * element_size(srcs[i].dtype());
    }
    if (!sources.empty() && bytes <= cuda_copies::kSourceStreamCopyBytes) {
      cuda_copies::copy_on_source_streams(sources, targets);
    } else if (!sources.empty()) {
      cuda_copies::copy_on_comm_streams(sources, targets, carriers);
    }
    for (size_t i : strided) Tensor(dsts[i]).copy_(srcs[i]);
  }
};

}  // namespace

Backend& cuda_backend() {
  static CudaBackend backend;
  return backend;
}

}  // namespace tandem::comm::detail
