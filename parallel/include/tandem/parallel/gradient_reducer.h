#pragma once
// GradientReducer: sums the replicas' flat gradient buffers (Note [Flat gradient buffers] in gradient_layout.h)
// bucket by bucket, each with one collective as soon as every replica's part of it is final, while backward goes on.
// It knows buffers, buckets and replicas by index only; the module that owns it keeps the replicas, installs the
// gradient views as .grad and runs backward.
//
//   parallel::GradientReducer reducer(layout, buffers);      // buffers[r]: replica r's flat gradient buffer
//   for (size_t r = 0; r < replicas; ++r) reducer.install_hooks(r, parameters_of_replica[r]);
//   reducer.begin(replicas);                                 // before each backward of the replicas
//   ... every replica's backward: the hooks call mark_ready(r, p) as each gradient is accumulated ...
//   reducer.finish();                                        // every buffer holds the sum over the replicas
//
// Note [Overlapped gradient reduction]: a step sums each bucket while backward still runs on the layers before it,
// like llm.c and DistributedDataParallel. Every replica parameter that requires grad carries a post-accumulate-grad
// hook (install_hooks, removed by the destructor) that calls mark_ready. During a step, when a replica's backward has
// accumulated the last gradient of a bucket on its device, mark_ready records a StreamMarker there; the thread that
// completes a bucket on the last replica starts the collective (comm::all_reduce_async) on the bucket's slices with
// those markers, so each device's communication stream runs the all-reduce as soon as its part is final, beside the
// rest of backward on the compute stream. Replicas without an input this step take part with the gradients they
// hold (markers recorded by begin()). Once every replica has finished, finish() sums the buckets that were never
// completed (parameters that got no gradient) with comm::all_reduce, and joins every bucket's all-reduce into the
// compute streams: device-side waits only, no host synchronization in the step. The hooks run on several worker
// threads at once; the per-step counters are atomic where threads share them, and comm launches one collective at
// a time. Within one process the buckets start in the order in which they become complete, which may differ from
// one step to the next: each is one collective over all of the process's devices, so every device sees the same
// sequence. A collective that spans processes needs one order on every process (Note [Fixed bucket order]). Outside
// a step, mark_ready only notes that the buffers hold fresh local gradients, so that reduce() sums them.
//
// Note [Fixed bucket order]: NCCL and MPI require every rank to issue its collectives in the same order, and which
// bucket completes first can differ between processes (and between the threads of one process). So when the
// collective spans processes (GradientCollective::spans_processes), the buckets are launched in one fixed order on
// every process: by ascending index, bucket 0 first, which is the order in which backward normally completes them
// (GradientLayout forms bucket 0 from the last parameters). A bucket that completes early waits until every bucket
// before it has been launched: the thread that completes the next bucket in that order launches it and then every
// consecutive bucket that has completed meanwhile. The cursor (the next bucket to launch) and the completion flags
// are guarded by a mutex, held while launching, so the launches themselves happen one after another in that order.
// finish() launches the buckets that are left in the same order: those complete by then are started, the others
// (a parameter without gradient) summed with what the buffers hold. reduce() runs the buckets in index order too.
// A collective that spans processes runs even when this process has a single replica, and a step overlaps
// whenever there are two or more buckets.
//
// Finishing with buckets incomplete is not an error (PyTorch's reducer refuses it unless told to look for unused
// parameters): their parameters got no gradient this step, and the gradients the buffers hold are summed.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "tandem/comm/comm.h"
#include "tandem/comm/process_group.h"
#include "tandem/core/stream_marker.h"
#include "tandem/core/tensor.h"
#include "tandem/parallel/gradient_layout.h"

namespace tandem::parallel {

// How a GradientReducer reduces one bucket: `slices` holds the bucket's slice of every buffer (one per replica, in
// replica order) and becomes their reduction in place. The defaults are comm's in-process collectives, which sum
// over the replicas; a process-group collective may take their place, with the same contracts, reducing over every
// replica of every process.
struct GradientCollective {
  // Starts the reduction after ready[r] on each slice's device (as comm::all_reduce_async); the work joins it.
  std::function<comm::AllReduceWork(std::vector<Tensor>& slices, const std::vector<StreamMarker>& ready)> start =
      comm::all_reduce_async;
  // The reduction, ordered after all work issued on the slices' devices (as comm::all_reduce).
  std::function<void(std::vector<Tensor>& slices)> run = comm::all_reduce;
  // The collective spans processes: it runs even with a single replica, and the buckets are launched in one fixed
  // order (Note [Fixed bucket order]).
  bool spans_processes = false;
  // When a step accumulates onto buffers that hold reduced values, whether this process's replica 0 keeps them (the
  // buffers of every other replica are cleared) or every buffer of this process is cleared (Note [Accumulating onto
  // sums] in gradient_reducer.cpp). In one process: true. Across processes: a sum keeps them on rank 0 only, an
  // average over the processes on every process.
  bool keeps_sum_on_replica0 = true;
  // 0: the collective leaves every slice holding the whole reduction (an all-reduce). W > 0: it is a reduce-scatter
  // over the W devices of the world (DistributedOptions::zero_stage >= 1, Note [Reduce-scattered buckets] in
  // parallel/src/distributed.cpp): each bucket's length is a multiple of W (Note [Padded buckets] in
  // gradient_layout.h), and each slice holds the reduction only on the chunk its device owns, local gradients
  // elsewhere. Gradients then cannot accumulate onto reduced values (prepare_to_accumulate() refuses).
  size_t scatter_devices = 0;
  // With scatter_devices > 0: the world index of this process's first device (rank * local devices); local device r
  // owns chunk scatter_first_device + r of every bucket (owned_gradients()).
  size_t scatter_first_device = 0;
  // Note [Staged gradient buckets] (DistributedOptions::zero_stage 2; requires scatter_devices > 0): no device holds
  // the whole gradient. Each buffer is the device's shard, numel() / W elements: the owned chunks of every bucket one
  // after another, in bucket order, where each reduction adds its chunk (so gradients accumulate in the shard until
  // it is zeroed: zero_staged()). Between steps the parameters hold no .grad. Backward fills a staging tensor per
  // bucket and device (zeroed, the bucket's length), allocated one bucket ahead of backward: bucket 0's when a step
  // opens, bucket b + 1's when bucket b's first gradient arrives. The parameters of a staged bucket get their views
  // of it as .grad, so backward accumulates into the staging tensor in place (a linear layer writes its weight
  // gradient there directly, Note [Gradient buffers] in core). A gradient that lands elsewhere (a bucket reached out
  // of order, a .grad replaced) is added into its place by the reducer's hook, and its own .grad dropped at once. A
  // bucket's collective reduces the staging tensors (zeros for a replica that staged nothing), each device adds its
  // owned chunk into its shard, and the views and staging tensors are dropped. So a device holds its shard, plus the
  // staging tensors of the buckets that backward is filling, the next one, and those waiting for their collective;
  // outside backward, only the shard. The collective runs with `run` (its reduction is done when the shard reads it).
  bool shards_gradients = false;
};

class GradientReducer {
 public:
  // Called with a bucket's index right after its collective was started in an overlapped step (begin()).
  using BucketStarted = std::function<void(size_t bucket)>;
  // Called once per step, by the first mark_ready of the step, on the thread that runs it (begin()).
  using FirstGradient = std::function<void()>;

  // buffers[r] is replica r's flat buffer of `layout` (1-D, layout.numel() elements, contiguous), one per device;
  // with collective.shards_gradients, its shard (1-D, layout.numel() / scatter_devices elements, contiguous, zeroed).
  // Errors: no buffers; a buffer of another shape, not contiguous, or on a device listed twice; a collective
  // function missing; shards_gradients without scatter_devices.
  GradientReducer(GradientLayout layout, std::vector<Tensor> buffers, GradientCollective collective = {});
  ~GradientReducer();  // removes the hooks; joins the collectives of a step still open
  GradientReducer(const GradientReducer&) = delete;
  GradientReducer& operator=(const GradientReducer&) = delete;

  size_t size() const { return buffers_.size(); }  // replicas
  const GradientLayout& layout() const { return layout_; }
  const std::vector<Tensor>& buffers() const { return buffers_; }
  const GradientCollective& collective() const { return collective_; }

  // Hooks every parameter of replica `replica` that has a place in the layout (parameters in layout order, on the
  // replica's device): once backward has accumulated its gradient, the hook calls mark_ready(replica, parameter)
  // (with shards_gradients, after moving the gradient into its bucket's staging tensor).
  // Errors: no such replica; hooks already installed for it; a parameter count or device that does not match.
  void install_hooks(size_t replica, const std::vector<Tensor>& parameters);

  // Opens a step in which replicas 0..active-1 run backward; the others take part with the gradients they hold.
  // When the buffers hold sums, those count once (prepare_to_accumulate()). With two or more buckets, and two or
  // more replicas or a collective that spans processes, the buckets are summed as they become complete; otherwise
  // finish() sums them all. Errors: a step already open (finish() or abandon() it first); active > size().
  // `started`, when set, is called once for each bucket whose collective starts during the step (started by
  // mark_ready, or by finish() in the fixed order of Note [Fixed bucket order]), right after collective.start
  // returned, on the thread that started it; so work it issues on the devices' communication streams runs after the
  // bucket's sum (Note [Optimizer steps in backward] in steps_in_backward.h). Calls for different buckets may run at
  // once on several threads. It is not called for the buckets that finish() sums with collective.run, nor in a step
  // that does not overlap. An exception it throws leaves the step to be abandoned, as one of the collective's.
  // `first_gradient`, when set, is called once, by the step's first mark_ready, on the thread running that
  // backward (ReplicatedModule queues the step's closing there: Note [Closing the step at the end of backward] in
  // replicated.h); an exception it throws propagates out of that mark_ready.
  void begin(size_t active, BucketStarted started = {}, FirstGradient first_gradient = {});
  // Replica `replica`'s gradient of `parameter` is final in its buffer (called by the hooks, on the thread running
  // that replica's backward; calls for different replicas may run at once). In an overlapped step it starts the
  // bucket's collective when this completes the bucket on the last replica.
  // Errors: no such replica or parameter; a parameter without a place; in an overlapped step, a parameter marked
  // twice for one replica ("expected to mark a gradient ready only once": one backward per replica and step).
  void mark_ready(size_t replica, size_t parameter);
  // Closes the step: sums the buckets not started yet and joins every started collective into the compute streams
  // (no host synchronization). Afterwards every buffer holds the sum over the replicas.
  // Errors: no step open; those of the collective (the step is then abandoned).
  void finish();
  // Closes a step without summing (after an exception in backward): joins the collectives already started; the
  // buffers hold partial results. Does nothing when no step is open.
  void abandon();

  // Before gradients accumulate outside a step (a backward whose gradients stay local until a later reduction, as in
  // gradient accumulation): when the buffers hold sums, clears the buffers that Note [Accumulating onto sums] (in
  // gradient_reducer.cpp) clears, so that the next reduction counts the sums once. Afterwards the buffers hold local
  // gradients (holds_sums() is false). begin() does the same. Errors: a step open; buffers that hold the chunks of a
  // reduce-scatter (GradientCollective::scatter_devices), which must be zeroed first.
  void prepare_to_accumulate();

  // Sums every bucket now, unless the buffers hold sums already (after finish(), or reduce() with no gradient
  // marked ready and no buffers_changed() since) or there is nothing to sum (one replica, in one process).
  // Errors: a step open.
  void reduce();
  bool step_open() const { return open_; }
  // Under a reduce-scatter (GradientCollective::scatter_devices > 0): the elements of `bucket` that local device
  // `replica` owns, those its buffer holds the reduction of (a view of the buffer); and where they start in the
  // bucket. Errors: no such replica or bucket; no reduce-scatter.
  Tensor owned_gradients(size_t replica, size_t bucket) const;
  int64_t owned_offset(size_t replica, size_t bucket) const;
  // With GradientCollective::shards_gradients: zeroes the shards and drops the staged gradients not yet reduced
  // (Note [Staged gradient buckets]); otherwise does nothing. Errors: a step open.
  void zero_staged();

  // Whether any gradient reached the buffers in the open step (or, with none open, in the last one).
  bool step_received_gradients() const { return received_.load(std::memory_order_acquire); }
  // The parameters (indices, with a place in the buffers) that some replica running backward in the open (or last)
  // step got no gradient for.
  std::vector<size_t> missing_gradients() const;
  bool holds_sums() const { return summed_; }
  // Whether the buffers hold gradients that a reduction has yet to sum (accumulated since the last finish() or
  // reduce(), or left partial by an abandoned step), where there is something to reduce (several replicas, or a
  // collective that spans processes). gradients_discarded() says the buffers were zeroed instead.
  bool holds_unreduced_gradients() const { return unreduced_.load(std::memory_order_acquire) && !nothing_to_reduce(); }
  void gradients_discarded() { unreduced_.store(false, std::memory_order_release); }
  // The buffers were written outside a step (zeroed, or gradients copied in): they hold local gradients now.
  void buffers_changed() { summed_ = false; }

 private:
  struct Step;  // the state of an overlapped step (gradient_reducer.cpp)

  bool nothing_to_reduce() const { return size() == 1 && !collective_.spans_processes; }
  bool staged() const { return collective_.shards_gradients; }
  void stage(size_t replica, size_t parameter, const Tensor& leaf);
  Tensor& staging(size_t replica, size_t bucket);
  void stage_ahead(size_t replica, size_t bucket);
  void drop_staging(size_t bucket);
  void reduce_bucket(size_t bucket);
  void check_owned(size_t replica, size_t bucket, const char* caller) const;
  void bucket_completed(Step& step, size_t bucket);
  void launch_bucket(Step& step, size_t bucket);
  void finish_overlapped_step();

  GradientLayout layout_;
  std::vector<Tensor> buffers_;  // [replica]
  GradientCollective collective_;
  // [bucket][replica]: the bucket's slice of buffers_[replica]; staged: its staging tensor (undefined when none)
  std::vector<std::vector<Tensor>> bucket_slices_;
  std::vector<int64_t> shard_offsets_;  // [bucket], staged: where the bucket's owned chunk lies in the shards
  struct Hook {
    Tensor parameter;
    uint64_t handle;
  };
  std::vector<std::vector<Hook>> hooks_;         // [replica]
  std::vector<std::vector<Tensor>> parameters_;  // [replica][parameter], staged: the hooked parameters
  bool open_ = false;                            // between begin() and finish() / abandon()
  size_t active_ = 0;                            // replicas running backward in the open (or last) step
  std::unique_ptr<Step> step_;                   // set while an overlapped step is open
  std::atomic<bool> summed_{false};              // the buffers hold sums, no gradient accumulated since
  std::atomic<bool> unreduced_{false};           // holds_unreduced_gradients(), before asking nothing_to_reduce()
  // Per step (begin() resets them): which gradients came, whether any did, and begin()'s first_gradient.
  std::vector<std::vector<char>> arrived_;  // [replica][parameter]; each replica's thread writes its own row
  std::atomic<bool> received_{false};
  FirstGradient first_gradient_;
};

}  // namespace tandem::parallel
