// The CUDA backend: one process drives every GPU. Broadcast, reduce and all-reduce are NCCL collectives (one NCCL
// group over the participating devices, on their communication streams); copies are peer copies that overlap.

#include <algorithm>

#include "collective.h"
#include "comm_backend.h"
#include "peer_copies.h"

namespace tandem::comm::detail {
namespace {

using nccl::Collective;

size_t count_of(const Tensor& t) { return static_cast<size_t>(t.numel()); }

class CudaBackend final : public Backend {
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
  // the first input's device, since every rank of an NCCL reduce contributes an input.
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

  // Note [Overlapping copies]: core's cross-device copy runs each copy on the destination's compute stream and then
  // makes the source's compute stream wait for it, so a gather's copies (one destination) and a scatter's copies
  // to several GPUs (one source) would run one after another. Here each copy runs on the communication stream of
  // the end it does not share with the others: the source's when every copy has the same destination device
  // (gather), the destination's otherwise (scatter); so they overlap. A destination with gaps between its elements
  // (a slice along an inner dimension) goes through core's staged copy instead.
  void copy(const std::vector<Tensor>& srcs, const std::vector<Tensor>& dsts) override {
    const Device gather_device = dsts[0].device();
    const bool one_destination =
        std::all_of(dsts.begin(), dsts.end(), [&](const Tensor& t) { return t.device() == gather_device; });
    std::vector<Tensor> sources;
    std::vector<Tensor> targets;
    std::vector<int> carriers;
    std::vector<size_t> strided;
    for (size_t i = 0; i < srcs.size(); ++i) {
      if (!dsts[i].is_contiguous()) {
        strided.push_back(i);
        continue;
      }
      sources.push_back(srcs[i].contiguous());
      targets.push_back(dsts[i]);
      carriers.push_back((one_destination ? srcs[i] : dsts[i]).device().index());
    }
    if (!sources.empty()) cuda_copies::copy_on_comm_streams(sources, targets, carriers);
    for (size_t i : strided) Tensor(dsts[i]).copy_(srcs[i]);
  }
};

}  // namespace

Backend& cuda_backend() {
  static CudaBackend backend;
  return backend;
}

}  // namespace tandem::comm::detail
