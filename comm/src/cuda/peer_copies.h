#pragma once
// Device-to-device copies for comm's scatter and gather (and the broadcast of dtypes that NCCL does not sum): small
// ones on their sources' compute streams, larger ones overlapping on the communication streams; both ordered against
// the compute streams of the copies' ends by events.

#include <cstddef>
#include <vector>

#include "tandem/core/tensor.h"

namespace tandem::comm::cuda_copies {

// Note [Small copies on their sources' streams]: a gather or scatter of at most kSourceStreamCopyBytes in all runs
// each copy on the compute stream of its source device (copy_on_source_streams): a scatter's copies one after another
// on the source's stream, a gather's on the streams of their sources (the part already on the destination as a
// kernel there). Above it the copies run on the communication streams, where copies from one source overlap
// (copy_on_comm_streams). Why (the figures, measured on 2 H200s joined by NVLink: docs/benchmarks.md, "Design
// measurements"):
//  - every cross-device wait (an event recorded on one device's stream, waited for on another's) costs a few
//    microseconds, more than a wait between two streams of one device. The fork through the communication streams
//    takes a wait from each end's compute stream and one back into each; on the sources' streams a gather or scatter
//    between two GPUs needs one cross-device wait each way, the least that orders the copy after the producers and
//    earlier users of both blocks (Note [Stream-ordered reuse]).
//  - a copy that pushes (issued on its source's device) is faster than one that pulls (issued on its destination's),
//    small and large; so a gather does not pull its parts onto the destination's stream.
//  - serializing copies costs at most the time of all but the longest: a few microseconds up to a few MiB, where the
//    fork costs more than that; above it a scatter's copies to several GPUs gain from running side by side.
// comm_bench measures both sides of the threshold against raw peer copies.
inline constexpr size_t kSourceStreamCopyBytes = size_t{4} << 20;  // 4 MiB

// dsts[i] = srcs[i] for contiguous tensors of equal size on CUDA devices, each copy on the compute stream of its
// source's device (Note [Small copies on their sources' streams]); a copy within one device is a copy kernel there.
// Ordering: before the copies, each source device's compute stream waits for the compute stream of every other
// device it writes to (earlier users of the destination blocks); after them, each destination device's compute
// stream waits for every other device that wrote to it (consumers of the destinations; and the sources' blocks,
// whose last use is then behind their own stream's copy). Each stream's event is recorded once per call, however
// many streams wait for it; copies within one device need no wait at all.
void copy_on_source_streams(const std::vector<Tensor>& srcs, const std::vector<Tensor>& dsts);

// dsts[i] = srcs[i] for contiguous tensors of equal size on CUDA devices (the two ends of a copy may be one
// device). Copy i runs on the communication stream of device carriers[i], which must be one of its two ends; copies
// on different streams overlap (Note [Comm peer copy ordering] in peer_copies.cpp).
void copy_on_comm_streams(const std::vector<Tensor>& srcs, const std::vector<Tensor>& dsts,
                          const std::vector<int>& carriers);

}  // namespace tandem::comm::cuda_copies
