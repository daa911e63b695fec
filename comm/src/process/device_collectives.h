#pragma once
// The device side of a process group: the collectives over every device of every process. Two implementations:
// host_collectives.cpp (virtual CPU devices, through the host channel) and cuda/group_collectives.cpp (one
// NCCL communicator over every GPU of every process; a stub in nocuda/).
//
// Contract for every call: the front end (process_group.cpp) has validated the tensors (one per local device, in
// devices() order, defined, contiguous, float32, equal shapes with nonzero elements) and disabled grad mode. Every
// call is collective over the processes, as HostChannel's. Each call is bounded by the watchdog: a blocking one arms
// an entry for its duration, one that issues device work hands it to a device watch (launch_tracker.h).

#include <memory>
#include <vector>

#include "collective_progress.h"
#include "host_channel.h"
#include "tandem/comm/process_group.h"
#include "tandem/core/stream_marker.h"
#include "tandem/core/tensor.h"
#include "watchdog.h"

namespace tandem::comm::detail {

class DeviceCollectives {
 public:
  virtual ~DeviceCollectives() = default;
  // In place over every device of every process; Average divides by the number of processes.
  virtual void all_reduce(const std::vector<Tensor>& tensors, ReduceOp op) = 0;
  // As all_reduce, started after ready[i] on each device and not joined: the caller joins it (comm's join, which
  // makes each compute stream wait for its communication stream). A synchronous implementation reduces here.
  virtual void start_all_reduce(const std::vector<Tensor>& tensors, const std::vector<StreamMarker>& ready,
                                ReduceOp op) = 0;
  // Every tensor becomes process root's first tensor.
  virtual void broadcast(const std::vector<Tensor>& tensors, int root) = 0;
  // outputs[i] (world_devices() x inputs' rows) = every device's input concatenated along dim 0 in global order.
  virtual void all_gather(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs) = 0;
  // outputs[i] = the reduction over every device of chunk (global rank of device i) of the inputs (dim 0).
  virtual void reduce_scatter(const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs, ReduceOp op) = 0;
  // reduce_scatter whose inputs may be overwritten: chunks[i], the view of tensors[i] at device i's global chunk,
  // receives what outputs[i] would, and the rest of tensors[i] is left unspecified. This form reduces into new
  // outputs and copies them in; a backend that can reduce in place overrides it.
  virtual void reduce_scatter_in_place(const std::vector<Tensor>& tensors, const std::vector<Tensor>& chunks,
                                       ReduceOp op) {
    std::vector<Tensor> outputs;
    for (const Tensor& chunk : chunks) outputs.push_back(Tensor::empty(chunk.shape(), chunk.device()));
    reduce_scatter(tensors, outputs, op);
    for (size_t i = 0; i < chunks.size(); ++i) Tensor(chunks[i]).copy_(outputs[i]);
  }
  // Returns once the work issued on the local devices before it is complete (host wait, bounded by the watchdog).
  virtual void synchronize() = 0;
  // Hands the work issued so far on the local devices' compute streams to the watchdog as one launch named `name` (a
  // string literal), in the order of the collectives, with their deadline: for work that runs collectives of the
  // group without issuing them here, a replay of a graph that captured them (ProcessGroup::watch_replay). Nothing to
  // do for the host collectives, whose work is done when their calls return. Errors: a compute stream being captured.
  virtual void watch_issued(const char* name) { (void)name; }
  // For the group's watchdog failure (Note [A distributed job never hangs]): ends the device work in flight so that
  // the process can exit (NCCL: ncclCommAbort on every local communicator). Safe to call from any thread, also while
  // another thread is inside a call of this object, and more than once; waits a bounded time. No call other than the
  // destructor may follow. Nothing to do for the host collectives.
  virtual void abort() noexcept {}
};

// CPU devices: local reductions through comm, the cross-process part through `channel` (which must outlive it), each
// call over the channel numbered in `progress` (Note [Desync reports] in collective_progress.h; it must outlive the
// returned object too). Also a group of one process on any devices: then every call is comm's single-process
// collective.
std::unique_ptr<DeviceCollectives> make_host_collectives(HostChannel& channel, Watchdog& watchdog,
                                                         CollectiveProgress& progress,
                                                         const std::vector<Device>& devices);
// CUDA devices: creates the NCCL communicator over every GPU of every process (unique id from process 0 through
// `channel`), bounded by `watchdog`, which must outlive the returned object (its destructor and the device entries
// it arms use it). Errors: tandem built without CUDA; NCCL's errors.
std::unique_ptr<DeviceCollectives> make_nccl_collectives(HostChannel& channel, Watchdog& watchdog,
                                                         const std::vector<Device>& devices);

}  // namespace tandem::comm::detail
