#pragma once
// CapturedStep: trainers::train_step's whole data-parallel step (forward, loss, backward, the gradient all-reduce and
// the optimizer step of every device) captured once per batch shape as one CUDA graph and replayed, so that a step
// costs a handful of host calls instead of dozens of kernel launches per device.
//
//   parallel::ReplicatedModule model(net, devices);
//   parallel::ReplicatedSGD sgd(model, {.lr = 0.1, .momentum = 0.9});
//   parallel::CapturedStep step(model, sgd, nn::mse_loss);
//   for (const trainers::Batch& batch : loader) {
//     Tensor loss = step.step(batch.features, batch.targets);   // eager warm-up, then capture, then replays
//     scheduler.step();                                          // an LR schedule needs no new capture
//   }
//
// Note [Capturing a step]: the first options.warmup_steps steps (at least one) run eagerly, as train_step does: they
// create everything created lazily (momentum or Adam buffers, cuBLAS and cuBLASLt handles, plans and workspaces,
// NCCL communicators, peer access). The next step of a batch shape not seen yet is captured, on the calling thread:
// DeviceGraph::begin_capture forks every device's streams into one capture on devices[0]'s compute stream; every
// replica's forward, weighted loss and backward run on this thread one after another (the reducer's hooks still fire
// and record each bucket's all-reduce in the capture, overlapping the rest of backward in the graph as it does
// eagerly; the weighted sum of the losses is recorded as they appear, Note [Losses off the critical path] in
// captured_step.cpp), then the reduction is finished and the optimizer's replayable_step() is recorded, and
// end_capture() joins the streams and instantiates the graph. An optimizer that steps in backward records each
// bucket's part of replayable_step() right after the bucket's all-reduce instead (Note [Optimizer steps in backward]
// in steps_in_backward.h), and the rest after the reduction. Nothing executes during the capture, so the step
// is then replayed once for the batch it was captured with. The replicas read their chunks from static buffers, one
// pair (features, targets) per device allocated before the capture; step() copies the batch's chunks into them
// (torch.chunk's split, as comm::scatter does) and replays: one graph launch on devices[0]'s compute stream covers
// every device (Note [Feeding a replay] in device_graph.h: the chunks are copied on their sources' compute streams,
// with no events of their own). The loss is written by the graph into a tensor of its own; step() returns a copy of
// it made on devices[0]'s compute stream, so a returned loss is never overwritten by a later step (or copies it into
// the caller's loss_out).
//
// Note [Host state of a captured step]: a replay must leave every piece of host state as the eager step would.
//  - The optimizer: capturing runs replayable_step() (or its parts), which changes no host state; each replay is
//    prepare_replay() (this step's learning rates and step factors into device memory, outside the graph), the
//    launch, then finish_replay() (Adam's step counts): so state_dict() and checkpoints count every step, and
//    set_lr or an LR schedule takes effect at the next replay (Note [Replayed optimizer steps] in optimizer.h).
//  - The reducer and the gradient views: the capture ran zero_grad and a whole overlapped step on the host, which
//    leaves them as an eager step does (buffers summed, step closed); a replay changes nothing there.
//  - The generator: a step whose forward draws on the host (Dropout's masks) cannot be captured (below); the capture
//    restores the generator state it found when it fails.
//  - The modules' training modes: a graph records the modes it was captured in; when the master's modes (which
//    every replica follows, Note [Following the master's modes] in module.h) differ from those, every graph is
//    dropped and the next steps are captured again. Modes switched and switched back between steps (an evaluation
//    in eval mode) keep the graphs.
//  - The tensors the graphs use: when a replica's parameter or gradient buffer is no longer the tensor the graphs
//    were captured with (Module::to, set_parameters, a .grad replaced), or the optimizer replaced its state
//    (load_state_dict, set_state: optim::Optimizer::state_generation()), every graph is dropped likewise. A replay
//    works on the flat gradient buffers, as the captured zero_grad installed their views; a .grad that the caller
//    replaces between steps (zero_grad with set_to_none) is not reinstalled by a replay.
//
// Note [Falling back to the eager step]: where capture is impossible, step() runs trainers::train_step's eager step
// (parallel::data_parallel_step) instead, and fallback_reason() says why: options.enabled false; CPU devices
// ("capture needs CUDA devices"); a batch with fewer rows than devices; an optimizer that cannot split its step;
// max_graphs graphs held already; across processes, another process that cannot capture the step or whose capture
// failed (Note [Capturing across processes]); and a step that does host work capture cannot record (host random
// draws such as Dropout's masks, copies to the host such as label checks): CUDA invalidates the capture and the
// failing call throws. The capture is then ended cleanly (DeviceGraph::abort_capture), the reducer's step abandoned
// and the generator restored, so the failed attempt changes no state (nothing it recorded ran), the step runs
// eagerly, and the reason (with the error's text) is kept: every later step of that shape runs eagerly at once.
//
// Note [Capturing across processes]: with a DistributedDataParallel's model whose group spans several processes on
// GPUs, every process captures and replays its own graph, whose bucket all-reduces are the group's NCCL collectives
// recorded into it (Note [Collectives inside a graph capture] in comm/src/cuda/group_collectives.cpp; the eager
// warm-up steps have created and connected the communicator, and made every buffer). NCCL's rules for graphs decide
// the rest: whether a collective is captured must be the same on every rank, and a graph's replay is collective with
// the graphs that the other ranks captured at the same time. A process alone cannot know that the others will take the
// same path, since each decides from its own batch (a short or empty shard of the last global batch), its own graphs
// and its own capture's outcome. So after the warm-up, every step starts with one host exchange through the group
// (ProcessGroup::exchange: a few bytes, no device work): each process sends whether it can capture this step (it has
// a row for every device), a digest of its batch's key (shapes, dtypes, each chunk's rows, the loss weights'
// denominator) and whether its graphs were invalidated (Note [Host state of a captured step]). If any process cannot
// capture, every process runs the step eagerly; otherwise every process picks the graph of the combination of all
// the digests, so graphs are only ever replayed with the graphs that were captured with them, and drops its graphs
// when any process's were invalidated. A combination seen for the first time is captured by every process in the same
// step, and a second exchange tells whether every capture succeeded: if one failed, every process drops its new graph
// and runs the step eagerly, and remembers the failure for that combination. Eager steps issue the same collectives
// in the same order as the captured ones, so a step is always matched. A step's host cost grows by the exchange:
// microseconds under MPI, the rendezvous files' polling under torchrun-style launches. Each replay is handed to the
// group's watchdog (ProcessGroup::watch_replay, named "captured training step"), so that a replay whose collectives
// never finish, because another process stopped or died, ends the job like a stuck collective; a process that stops
// calling step() leaves the others waiting in the exchange, which the watchdog bounds too. Optimizer steps in backward
// stay off across processes (ReplicatedModule::sums_on_comm_streams): the group sums on streams of its own, so a
// bucket's update would need an event per bucket to follow its sum.
//
// Note [Graphs before communicators]: NCCL requires the graphs that captured a communicator's collectives to be
// destroyed before the communicator (Note [Process group communicators are destroyed]). The group is held by the
// model's reducer (its collective's functions and GradientCollective::group), which outlives this CapturedStep by its
// contract, and by group_ here, declared before graphs_: so the graphs go first even where the model's owner is
// destroyed before this object.
//
// Requirements: model and optimizer outlive the CapturedStep. Not thread-safe; no other thread may use the devices
// while a step is captured. Across processes, every process makes its CapturedStep with the same options and calls
// it at the same steps (as every collective requires).

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "tandem/comm/process_group.h"
#include "tandem/core/device_graph.h"
#include "tandem/core/dtype.h"
#include "tandem/core/shape.h"
#include "tandem/core/tensor.h"
#include "tandem/parallel/replicated.h"
#include "tandem/parallel/replicated_optimizer.h"
#include "tandem/parallel/weighted_step.h"

namespace tandem::parallel {

struct CaptureOptions {
  int warmup_steps = 2;   // eager steps before the first capture; at least one is always taken
  size_t max_graphs = 4;  // graphs held at most (one per batch shape); further shapes run eagerly
  bool enabled = true;    // false: every step runs eagerly
};

class CapturedStep {
 public:
  // Errors: an empty loss function; warmup_steps < 0.
  CapturedStep(ReplicatedModule& model, ReplicatedOptimizer& optimizer, LossFunction loss, CaptureOptions options = {});
  ~CapturedStep();  // destroys the graphs (synchronizing their devices) before anything they captured
  CapturedStep(const CapturedStep&) = delete;
  CapturedStep& operator=(const CapturedStep&) = delete;

  // One optimizer step on the batch (features [n, ...], targets [n, ...], any device), with trainers::train_step's
  // contract and result: the batch's mean loss, a scalar on devices[0] (not read here; reading it waits for the
  // step). Replayed from a graph when possible (Note [Capturing a step]), eager otherwise (Note [Falling back to the
  // eager step]). Errors: as train_step.
  Tensor step(const Tensor& features, const Tensor& targets);
  // The same step on a batch already cut over the devices, as trainers::TensorDataLoader delivers it with the model's
  // devices: inputs[i] and labels[i] on devices[i] hold chunk i, the chunks being torch.chunk's (comm::scatter's) cut
  // of the batch's rows over the devices, one per device that gets rows. A replay copies them into the graph's static
  // buffers on the devices' compute streams (asynchronously: the host does not wait); the eager step uses them as
  // they are. A batch shape's graph serves both step() and step_chunks(). Errors: no chunks; different numbers of
  // inputs and labels; a chunk not on its device, of another dtype or shape than chunk 0 (beyond its rows), or with
  // other rows than torch.chunk's cut (each naming the chunk); those of train_step.
  Tensor step_chunks(const std::vector<Tensor>& inputs, const std::vector<Tensor>& labels);
  // The same steps, writing the batch's mean loss into `loss_out` (a one-element float32 tensor on devices[0], such
  // as a slot of a per-epoch tensor of losses) on devices[0]'s compute stream instead of into a new tensor, and
  // returning loss_out: a replay then makes no allocation and one copy for the loss. Errors: a loss_out that is
  // undefined, not of one float32 element or not on devices[0] (checked before the step); those of the step.
  Tensor step(const Tensor& features, const Tensor& targets, const Tensor& loss_out);
  Tensor step_chunks(const std::vector<Tensor>& inputs, const std::vector<Tensor>& labels, const Tensor& loss_out);
  // The step of one process on its shard of a global batch of `global_rows` rows (trainers::DistributedSampler, Note
  // [Sharding per global batch] in distributed_sampler.h): as step_chunks, but each chunk's loss is weighted by its
  // share of the global batch (rows_i / global_rows), the chunks may have any rows (at least one each, on a prefix
  // of the devices), and there may be none when the model's gradients are reduced across processes (this process
  // has no rows in this batch and takes part in the reduction eagerly). With a DistributedDataParallel summing over
  // the processes (DistributedOptions::reduction Sum), the gradient of the global batch's mean loss, as
  // trainers::train_step's; returns this process's part of that loss. Errors: global_rows below the chunks' rows;
  // no chunks in one process; those of step_chunks other than torch.chunk's cut.
  Tensor step_shard(const std::vector<Tensor>& inputs, const std::vector<Tensor>& labels, int64_t global_rows);
  Tensor step_shard(const std::vector<Tensor>& inputs, const std::vector<Tensor>& labels, int64_t global_rows,
                    const Tensor& loss_out);

  bool captured() const { return captured_; }  // whether the last step() replayed a graph
  // Why the last step() ran eagerly; "" when it replayed.
  const std::string& fallback_reason() const { return fallback_reason_; }
  // Whether the last step() was one of the eager warm-up steps (Note [Capturing a step]).
  bool warming_up() const { return warming_up_; }
  // Why no step can be captured, whatever its batch ("" when steps may be): options.enabled false, CPU devices, an
  // optimizer that cannot split its step (Note [Falling back to the eager step]).
  std::string blocker() const;
  size_t graphs() const { return graphs_.size(); }  // graphs held (one per distinct batch shape)
  size_t captures() const { return captures_; }     // graphs captured so far, those captured again included
  // The graph the last step() replayed, for inspection (DeviceGraph::nodes, debug_dump); null when it ran eagerly.
  // Valid until the next step() or reset().
  const DeviceGraph* last_graph() const { return captured_ ? last_graph_ : nullptr; }
  // Drops every graph and every remembered capture failure: the next step of each shape is captured again.
  void reset();

 private:
  // One batch shape's graph and the static tensors it reads and writes.
  struct Graph {
    std::vector<Tensor> inputs;   // [replica]: the chunk of features the graph reads
    std::vector<Tensor> labels;   // [replica]: the chunk of targets
    std::vector<Tensor> weights;  // [replica]: loss_weights(labels), the seeds of the backwards
    Tensor loss_slots;            // [replica] on devices[0]: the replicas' losses (Note [Losses off the critical path])
    Tensor loss;                  // written by the graph
    DeviceGraph graph;            // declared last: destroyed first, before the tensors it uses
  };
  struct Key {
    Shape features, targets;
    DType features_dtype = DType::Float32, targets_dtype = DType::Float32;
    std::vector<int64_t> chunk_rows;  // step_shard's: each chunk's rows; empty for torch.chunk's cut of the rows
    int64_t global_rows = 0;          // the loss weights' denominator (the batch's rows but in step_shard)
    std::vector<uint64_t> processes;  // across processes: every process's digest (Note [Capturing across processes])
    auto operator<=>(const Key&) const = default;
  };
  // One batch as step() got it: whole (the features and targets) or already cut into chunks (inputs, labels).
  struct Batch {
    const Tensor* features = nullptr;
    const Tensor* targets = nullptr;
    const std::vector<Tensor>* inputs = nullptr;
    const std::vector<Tensor>* labels = nullptr;
    const Tensor* loss_out = nullptr;  // where the loss goes; null: into a new tensor
    int64_t rows = 0;                  // this process's
    Key key;
  };
  // What the processes agreed for a step (Note [Capturing across processes]).
  struct Agreement {
    std::string eager_reason;         // why every process runs the step eagerly; "" when it may be captured
    bool reset = false;               // some process's graphs were invalidated: every process drops its graphs
    std::vector<uint64_t> processes;  // every process's digest of its key
  };

  Tensor run(const Batch& batch);
  // The batch of step(features, targets) or step_chunks(inputs, labels), checked.
  Batch whole_batch(const Tensor& features, const Tensor& targets) const;
  Batch chunked_batch(const std::vector<Tensor>& inputs, const std::vector<Tensor>& labels) const;
  Batch shard_batch(const std::vector<Tensor>& inputs, const std::vector<Tensor>& labels, int64_t global_rows) const;
  // Throws unless loss_out can take a step's loss.
  void check_loss_out(const Tensor& loss_out, const char* caller) const;
  // The step's loss as the caller asked for it: `loss` itself, or copied into batch.loss_out.
  static Tensor deliver(const Batch& batch, const Tensor& loss);
  // The batch's chunks for the replicas: as given, or cut from the whole batch by torch.chunk's rule (views).
  std::pair<std::vector<Tensor>, std::vector<Tensor>> chunks(const Batch& batch) const;
  Tensor eager(const Batch& batch, std::string reason);
  Tensor replay(Graph& graph, const Batch& batch);
  // Captures the step for this batch's shape; null (and `reason` set) when the capture failed.
  std::unique_ptr<Graph> capture(const Batch& batch, std::string& reason);
  // Why this batch cannot be captured (fewer rows than devices); "" when it can.
  std::string rows_blocker(const Batch& batch) const;
  bool across_processes() const { return group_ != nullptr; }
  // The processes' exchange before a step: this process can capture it unless `blocked`; its graphs were invalidated
  // when `invalidated`.
  Agreement agree(const Batch& batch, const std::string& blocked, bool invalidated);
  // Whether every process's capture of this step succeeded; `reason` becomes why not when another's failed.
  bool agree_on_capture(bool succeeded, std::string& reason);
  // What the graphs depend on besides their own tensors (Note [Host state of a captured step]): training modes,
  // the optimizer's state generation, and the addresses of every replica's parameters and gradient buffer.
  std::vector<uint64_t> fingerprint() const;

  ReplicatedModule& model_;
  ReplicatedOptimizer& optimizer_;
  LossFunction loss_;
  CaptureOptions options_;
  // The model's process group when it spans several processes; before graphs_ (Note [Graphs before communicators]).
  std::shared_ptr<comm::ProcessGroup> group_;
  int eager_steps_ = 0;
  std::vector<uint64_t> fingerprint_;  // fingerprint() when the graphs were captured
  std::map<Key, std::unique_ptr<Graph>> graphs_;
  std::map<Key, std::string> failures_;  // shapes whose capture failed, with the reason
  size_t captures_ = 0;
  bool captured_ = false;
  const DeviceGraph* last_graph_ = nullptr;
  bool warming_up_ = false;
  std::string fallback_reason_;
};

}  // namespace tandem::parallel
