#pragma once
// Device-to-device communication with torch.cuda.comm semantics (see docs/comm.md). Every function accepts any mix
// of devices: CUDA devices (NCCL collectives and peer copies, one process driving all GPUs) and virtual CPU devices
// (host copies and adds). Results are not recorded by autograd; parallel/ builds the differentiable versions.
//
// Ordering: on CUDA every function is asynchronous with respect to the host and ordered after the work already
// issued on the participating devices' compute streams; its results may be used on those streams at once.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "tandem/core/device.h"
#include "tandem/core/stream_marker.h"
#include "tandem/core/tensor.h"

namespace tandem::comm {

class ProcessGroup;  // process_group.h

inline constexpr size_t kDefaultBufferSize = 10485760;  // 10 MiB

// Dtypes: broadcast, broadcast_coalesced, scatter and gather copy tensors of every dtype (float32, int64, bfloat16),
// keeping it; the reductions (reduce_add, reduce_add_coalesced, all_reduce, all_reduce_async) sum float32 tensors
// only and refuse others with an Error naming the tensor and its dtype.

// Returns one tensor per entry of `devices`, in that order, each equal to `tensor`.
// Ensures: an entry equal to tensor.device() is `tensor` itself (shares storage, no copy); every other entry is a
// new contiguous tensor on that device. Zero-element tensors keep their full shape.
// Errors: undefined tensor; empty `devices`; a device that does not exist (cuda:7 with 2 GPUs).
std::vector<Tensor> broadcast(const Tensor& tensor, const std::vector<Device>& devices);

// Broadcasts several tensors at once, with one collective for all of them (on CUDA, one NCCL group with an operation
// per tensor, straight into the outputs: nothing is packed or unpacked). `buffer_size` is accepted for compatibility
// with torch.cuda.comm, which stages tensors in flat buckets of that size; tandem stages nothing, so it has no effect.
// Requires: every tensor is on devices[0] (the error names the first offender).
// Ensures: result[d][i] is tensors[i] on devices[d]; result[0][i] is tensors[i] itself. Outputs on the other
// devices are contiguous and alias neither each other nor the inputs.
// Errors: empty `devices`; a device that does not exist; an undefined tensor; a tensor not on devices[0].
std::vector<std::vector<Tensor>> broadcast_coalesced(const std::vector<Tensor>& tensors,
                                                     const std::vector<Device>& devices,
                                                     size_t buffer_size = kDefaultBufferSize);

// Sums tensors of equal shape that live on distinct devices; the result is on `destination`, which defaults to
// the first input's device and need not hold an input (tandem: PyTorch requires it to).
// Ensures: a single input (on the destination) is returned itself; otherwise the result is a new contiguous
// tensor that aliases no input. CUDA: one NCCL reduce when every input is a contiguous CUDA tensor on distinct
// devices. CPU: the sum is accumulated in input order.
// Errors: empty `inputs`; an undefined input; shapes differ ("input 1 has shape [5, 4] but expected [5, 5]");
// two inputs on one device; a destination that does not exist.
Tensor reduce_add(const std::vector<Tensor>& inputs, std::optional<Device> destination = std::nullopt);

// inputs[d] is a list of tensors on one device per d (distinct devices); all lists have the same length and
// matching shapes position by position. Result [i] is the sum over d of inputs[d][i], on `destination` (default:
// the device of inputs[0]). One reduction for all the tensors, as broadcast_coalesced (`buffer_size` has no effect).
// Ensures: results are contiguous and alias neither the inputs nor each other; with a single list, the result
// holds those tensors themselves when they are on the destination.
// Errors: empty `inputs`; lists of different lengths; a shape mismatch (naming list and position); a list whose
// tensors are not all on one device; two lists on one device; a destination that does not exist.
std::vector<Tensor> reduce_add_coalesced(const std::vector<std::vector<Tensor>>& inputs,
                                         std::optional<Device> destination = std::nullopt,
                                         size_t buffer_size = kDefaultBufferSize);

// Splits `tensor` along `dim` (negative wraps) and places chunk i on devices[i].
// Without chunk_sizes: Tensor::chunk(devices.size(), dim) rules: each chunk has ceil(n / k) rows, the last fewer,
// and there may be FEWER chunks than devices (1 row over 2 devices gives 1 chunk; 13 over 6 gives 5).
// With chunk_sizes: exactly one size per device, each >= 0, summing to the size of `dim`.
// Ensures: a chunk whose device is the source's is a view of `tensor` (no copy); the others are contiguous copies.
// Errors: undefined tensor; empty `devices`; a device that does not exist; "got 3 chunk sizes for 2 devices";
// "chunk_sizes sum to 7 but dim 0 has size 6"; a negative size; a 0-dim tensor; `dim` out of range.
std::vector<Tensor> scatter(const Tensor& tensor, const std::vector<Device>& devices,
                            const std::vector<int64_t>& chunk_sizes = {}, int64_t dim = 0);

// Each tensor scattered as scatter(tensor, devices) does (Tensor::chunk's cut along dim 0; result[t][i] on
// devices[i]), with the copies of all of them issued together, so that they share their stream waits (a batch's
// features and targets). Ensures: as scatter. Errors: as scatter, for each tensor; an empty `tensors` returns {}.
std::vector<std::vector<Tensor>> scatter_all(const std::vector<Tensor>& tensors, const std::vector<Device>& devices);

// Concatenates `tensors` along `dim` (negative wraps) onto `destination` (default: the first tensor's device).
// Ensures: the result is a new contiguous tensor (also when there is one input on the destination).
// Errors: empty list; an undefined tensor; different numbers of dimensions; a size that differs outside `dim`
// ("tensor 1 has shape [2, 4] but expected [*, 5]"); tensors of different dtypes; a destination that does not exist.
Tensor gather(const std::vector<Tensor>& tensors, int64_t dim = 0, std::optional<Device> destination = std::nullopt);

// In place (tandem): every tensor (one per device, equal shapes) becomes the elementwise sum of all of them.
// CUDA: one NCCL all-reduce when every tensor is a contiguous CUDA tensor.
// Errors: empty list; an undefined tensor; shapes differ; two tensors on one device.
void all_reduce(std::vector<Tensor>& tensors);

// Creates up front what the first collectives over `devices` would create lazily, so that a timed loop does not pay
// for it in its first step: tandem::warm_up's streams, cuBLAS handles and peer access (tandem/core/warm_up.h), and,
// when every device is a CUDA device and there are several, the NCCL communicators of that device set (the cached
// ones that broadcast, reduce_add, all_reduce and their coalesced and asynchronous forms use for those devices, in
// whatever order they are listed). Virtual CPU devices need nothing; a ProcessGroup creates its communicator when it
// is created. Safe to call again. Errors: a device that does not exist; a device listed twice.
void warm_up(const std::vector<Device>& devices);

// The part of an all_reduce_async still to be joined into the devices' work. Destroying it joins it (as wait()).
class AllReduceWork {
 public:
  AllReduceWork() = default;  // nothing to join
  AllReduceWork(AllReduceWork&& other) noexcept;
  AllReduceWork& operator=(AllReduceWork&& other);  // joins the work it held first
  ~AllReduceWork();  // joins as wait() does; never throws: a failure is reported on stderr instead

  // Orders all later work on the tensors' devices after the all-reduce; the host does not wait for it. Afterwards
  // the tensors hold the sums and may be used and released. Does nothing when already joined.
  void wait();
  bool pending() const { return !tensors_.empty(); }

 private:
  friend AllReduceWork all_reduce_async(std::vector<Tensor>& tensors, const std::vector<StreamMarker>& ready);
  friend class ProcessGroup;  // its all_reduce_async joins the same way
  explicit AllReduceWork(std::vector<Tensor> tensors) : tensors_(std::move(tensors)) {}

  std::vector<Tensor> tensors_;  // held until the join, so that no storage is released while the sum runs
};

// all_reduce, started without ordering later work after it (tandem). On CUDA, each device's communication stream
// waits for ready[i] only, not for everything issued on its compute stream, and the NCCL all-reduce runs there: it
// overlaps whatever the compute streams run after the markers (the rest of a backward pass), and wait() on the
// returned work joins it back into them (Note [Deferred join] in comm/src/cuda/collective.h). Until then the
// tensors must not be touched: no work issued after ready[i] may read or write tensors[i], and the caller must not
// read them; the work keeps their storage alive. On CPU devices and mixed device lists the sum is done here and
// the work has nothing to join. Concurrent calls from several threads are fine; each is one collective over all
// devices, so the ranks agree on the order.
// Requires: ready[i] was recorded on tensors[i]'s device after the work that produces tensors[i].
// Errors: those of all_reduce; a tensor that is not contiguous; ready of another length than tensors, or a marker
// on another device than its tensor.
AllReduceWork all_reduce_async(std::vector<Tensor>& tensors, const std::vector<StreamMarker>& ready);

}  // namespace tandem::comm
