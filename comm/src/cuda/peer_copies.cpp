#include "peer_copies.h"

#include <algorithm>
#include <utility>

#include "cuda/peer_access.h"
#include "tandem/core/cuda/context.h"

namespace tandem::comm::cuda_copies {
namespace {

size_t bytes_of(const Tensor& t) { return static_cast<size_t>(t.numel()) * element_size(t.dtype()); }

// One peer copy on `stream` (of the current device).
void issue_copy(const Tensor& src, const Tensor& dst, cudaStream_t stream) {
  cuda::copy_peer_async(dst.mutable_data_ptr(), dst.device().index(), src.data_ptr(), src.device().index(), bytes_of(src),
                        stream);
}

void add_once(std::vector<int>& devices, int device) {
  if (std::find(devices.begin(), devices.end(), device) == devices.end()) devices.push_back(device);
}

}  // namespace

void copy_on_source_streams(const std::vector<Tensor>& srcs, const std::vector<Tensor>& dsts) {
  std::vector<std::pair<int, int>> pairs;  // (source device, destination device) of the copies across devices, once
  for (size_t i = 0; i < srcs.size(); ++i) {
    const int from = srcs[i].device().index();
    const int to = dsts[i].device().index();
    if (from == to) continue;
    if (std::find(pairs.begin(), pairs.end(), std::pair{from, to}) == pairs.end()) pairs.emplace_back(from, to);
    cuda::enable_peer_access_between(from, to);
  }
  // The compute streams on one side of the pairs whose other side is `device` (sources when `device` is a
  // destination, and the reverse).
  const auto partners = [&](int device, bool device_is_source) {
    std::vector<cudaStream_t> streams;
    for (const auto& [from, to] : pairs) {
      if (device_is_source ? from == device : to == device) {
        streams.push_back(cuda::compute_stream(device_is_source ? to : from));
      }
    }
    return streams;
  };
  std::vector<int> destinations;
  std::vector<int> sources;
  for (const auto& [from, to] : pairs) {
    add_once(sources, from);
    add_once(destinations, to);
  }
  // Each source's stream waits for the destinations it writes to: earlier users of the destination blocks.
  for (int to : destinations) cuda::streams_wait(partners(to, false), cuda::compute_stream(to), to);
  for (size_t i = 0; i < srcs.size(); ++i) {
    const int from = srcs[i].device().index();
    if (from == dsts[i].device().index()) {
      Tensor(dsts[i]).copy_(srcs[i]);  // a kernel on that device's compute stream
      continue;
    }
    cuda::DeviceGuard guard(from);
    issue_copy(srcs[i], dsts[i], cuda::compute_stream(from));
  }
  // Each destination's stream waits for the sources that wrote to it: consumers of the destinations.
  for (int from : sources) cuda::streams_wait(partners(from, true), cuda::compute_stream(from), from);
}

// Note [Comm peer copy ordering]: a copy runs on a communication stream (Note [Overlapping copies] in
// cuda_backend.cpp) and touches two devices: its carrier stream first waits for the compute streams of both ends
// (the producer of the source; earlier users of the destination's block), then every copy is issued, then the
// compute streams of both ends wait for the carrier stream (consumers of the destination; reuse of the source's
// block). All waits are enqueued before any copy is issued, so copies on different carrier streams do not wait for
// one another. Each producer's event is recorded once per call, however many streams wait for it.
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
  // The streams that wait for `producer` (an end device's compute stream, or a carrier's communication stream).
  const auto waiting_for = [&](int producer, bool producer_is_carrier) {
    std::vector<cudaStream_t> consumers;
    for (const auto& [carrier, end] : joins) {
      if (producer_is_carrier && carrier == producer) consumers.push_back(cuda::compute_stream(end));
      if (!producer_is_carrier && end == producer) consumers.push_back(cuda::comm_stream(carrier));
    }
    return consumers;
  };
  std::vector<int> ends;
  std::vector<int> carrier_devices;
  for (const auto& [carrier, end] : joins) {
    add_once(ends, end);
    add_once(carrier_devices, carrier);
  }
  for (int end : ends) cuda::streams_wait(waiting_for(end, false), cuda::compute_stream(end), end);
  for (size_t i = 0; i < srcs.size(); ++i) {
    cuda::DeviceGuard guard(carriers[i]);
    issue_copy(srcs[i], dsts[i], cuda::comm_stream(carriers[i]));
  }
  for (int carrier : carrier_devices) {
    cuda::streams_wait(waiting_for(carrier, true), cuda::comm_stream(carrier), carrier);
  }
}

}  // namespace tandem::comm::cuda_copies
