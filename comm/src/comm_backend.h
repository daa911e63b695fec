#pragma once
// The communication backend interface: the primitives that the front end (comm/src/*.cpp) reduces every comm
// function to. Two implementations: cpu/ (copies and adds through core; serves virtual CPU devices and any mix of
// devices) and cuda/ (NCCL collectives and peer copies, one process driving all GPUs; a stub in nocuda/).
// Named comm_backend.h rather than backend.h because core/src (on comm's include path in CUDA builds, through
// tandem_core_internal) has a backend.h.
//
// Contract for every call: the tensors are defined and have a nonzero number of elements; the front end has
// validated devices and shapes, allocated the outputs, and disabled grad mode. The collectives take contiguous
// tensors in lists, position i of every list holding tensors of one size: a coalesced call passes all its tensors
// (Note [Coalesced calls are one collective] in coalesced.cpp), a plain one lists of one. Each call is one collective over the whole lists where the backend can (one
// NCCL group of per-tensor operations on CUDA), so nothing is packed into or unpacked out of flat buffers.

#include <vector>

#include "tandem/core/device.h"
#include "tandem/core/stream_marker.h"
#include "tandem/core/tensor.h"

namespace tandem::comm::detail {

class Backend {
 public:
  virtual ~Backend() = default;
  // dsts[k][i] = srcs[i] for every k and i; the srcs live on one device, each list dsts[k] on another (the devices
  // pairwise distinct).
  virtual void broadcast(const std::vector<Tensor>& srcs, const std::vector<std::vector<Tensor>>& dsts) = 0;
  // outputs[i] = inputs[0][i] + inputs[1][i] + ... for every i; each list inputs[d] lives on one device (pairwise
  // distinct); the outputs are fresh tensors on one device (which may or may not hold an input list).
  virtual void reduce(const std::vector<std::vector<Tensor>>& inputs, const std::vector<Tensor>& outputs) = 0;
  // In place: every tensor becomes the sum of all of them; pairwise distinct devices.
  virtual void all_reduce(const std::vector<Tensor>& tensors) = 0;
  // all_reduce started after ready[i] on each tensor's device (a marker on that device), ordering nothing after it
  // yet: join(tensors) must follow before the tensors are used or released. A synchronous backend sums here.
  virtual void start_all_reduce(const std::vector<Tensor>& tensors, const std::vector<StreamMarker>& ready) = 0;
  // Orders the later work on the tensors' devices after every all-reduce started on them.
  virtual void join(const std::vector<Tensor>& tensors) = 0;
  // dsts[i] = srcs[i] for every i (equal shapes, any strides, any devices), with the copies overlapping where the
  // backend can (scatter: one source device, gather: one destination device).
  virtual void copy(const std::vector<Tensor>& srcs, const std::vector<Tensor>& dsts) = 0;
};

Backend& copy_backend();  // cpu/: any devices, through Tensor::copy_ and Tensor::add_
Backend& cuda_backend();  // cuda/: CUDA devices only; throws when tandem was built without CUDA

// cuda/: creates the cached NCCL communicators that the CUDA backend's collectives over these distinct CUDA devices
// use (comm::warm_up); nocuda/: throws.
void create_communicators(const std::vector<Device>& devices);

// The CUDA backend when every participating device is a CUDA device, the copy backend otherwise.
Backend& backend_for(const std::vector<Device>& participants);

}  // namespace tandem::comm::detail
