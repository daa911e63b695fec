#include "peer_copies.h"

#include <algorithm>
#include <utility>

#include "cuda/peer_access.h"
#include "tandem/core/cuda/context.h"

namespace tandem::comm::cuda_copies {

// Note [Comm peer copy ordering]: a copy runs on a communication stream (Note [Overlapping copies]) and touches two
// devices: its carrier stream first waits for the compute streams of both ends (the producer of the source; earlier
// users of the destination's block), then every copy is issued, then the compute streams of both ends wait for the
// carrier stream (consumers of the destination; reuse of the source's block). All waits are recorded before any
// copy is issued, so copies on different carrier streams do not wait for one another.
void copy_on_comm_streams(const std::vector<Tensor>& srcs, const std::vector<Tensor>& dsts,
                          const std::vector<int>& carriers) {
  std::vector<std::pair<int, int>> joins;  // (carrier, end device), each once
  for (size_t i = 0; i < srcs.size(); ++i) {
    for (int end : {srcs[i].device().index(), dsts[i].device().index()}) {
      if (std::find(joins.begin(), joins.end(), std::pair{carriers[i], end}) == joins.end()) {
        joins.emplace_back(carriers[i], end);
      }
    }
    cuda::enable_peer_access_between(srcs[i].device().index(), dsts[i].device().index());
  }
  for (const auto& [carrier, end] : joins) {
    cuda::stream_wait(cuda::comm_stream(carrier), cuda::compute_stream(end), end);
  }
  for (size_t i = 0; i < srcs.size(); ++i) {
    const size_t nbytes = static_cast<size_t>(srcs[i].numel()) * element_size(srcs[i].dtype());
    cuda::DeviceGuard guard(carriers[i]);
    TANDEM_CUDA_CHECK(cudaMemcpyPeerAsync(dsts[i].mutable_data_ptr(), dsts[i].device().index(), srcs[i].data_ptr(),
                                          srcs[i].device().index(), nbytes, cuda::comm_stream(carriers[i])));
  }
  for (const auto& [carrier, end] : joins) {
    cuda::stream_wait(cuda::compute_stream(end), cuda::comm_stream(carrier), carrier);
  }
}

}  // namespace tandem::comm::cuda_copies
