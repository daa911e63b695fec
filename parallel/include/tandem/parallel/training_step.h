#pragma once
// TrainingStep: the one way a batch is trained on. It holds the model's data-parallel form (the local replicas of a
// ReplicatedModule and, for a DistributedDataParallel, its process group), the optimizer and the loss, and takes one
// batch through step(batch): each device's chunk through forward, its loss weighted by the chunk's share of the
// (global) batch, backward, the gradient sum of every device of every process, and the optimizer's update of every
// replica. The strategies are inside it:
//  - eager: the step as issued kernel by kernel;
//  - steps in backward: each gradient bucket's parameters updated while backward still runs (Note [Optimizer steps in
//    backward] in steps_in_backward.h), where the optimizer and the devices allow and options.steps_in_backward;
//  - captured: the whole step recorded once per batch shape as one CUDA graph over every local device and replayed
//    (Note [Capturing a step]), where options.capture, the devices and the optimizer allow; strategy() and
//    fallback_reason() say what the last step ran and why it was not captured.
// Every strategy gives bitwise the same parameters, optimizer state and loss.
//
//   parallel::ReplicatedModule model(net, devices);
//   parallel::ReplicatedAdamW adamw(model, {.lr = 1e-3});
//   parallel::TrainingStep step(model, adamw, nn::mse_loss);
//   for (...) {
//     Tensor loss = step.step({.features = x, .targets = y});   // a scalar on devices[0], not read here
//     scheduler.step();                                          // an LR schedule needs no new capture
//   }
//
// A process of a group steps on its shard of every global batch (Note [Sharding per global batch] in
// trainers/distributed_sampler.h): TrainingStep(ddp, optimizer, loss) and step({.inputs, .labels, .global_rows})
// with this process's chunks, each weighted by its share of the global batch. The DistributedDataParallel must sum
// (DistributedOptions::reduction Sum), so every device of every process ends with the gradient of the global batch's
// mean loss, as one process over every device would; rank 0's buffers are broadcast before each step as its forward
// does (DistributedOptions::broadcast_buffers).
//
// Note [Capturing a step]: the first options.warmup_steps steps (at least one) run eagerly: they
// create everything created lazily (momentum or Adam buffers, cuBLAS and cuBLASLt handles, plans and workspaces,
// NCCL communicators, peer access). The next step of a batch shape not seen yet is captured, on the calling thread:
// DeviceGraph::begin_capture forks every device's streams into one capture on devices[0]'s compute stream; every
// replica's forward, weighted loss and backward run on this thread one after another (the reducer's hooks still fire
// and record each bucket's all-reduce in the capture, overlapping the rest of backward in the graph as it does
// eagerly; the weighted sum of the losses is recorded as they appear, Note [Losses off the critical path] in
// training_step_capture.cpp), then the reduction is finished and the optimizer's replayable_step() is recorded, and
// end_capture() joins the streams and instantiates the graph. An optimizer that steps in backward records each
// bucket's part of replayable_step() right after the bucket's all-reduce instead (Note [Optimizer steps in backward]
// in steps_in_backward.h), and the rest after the reduction. Nothing executes during the capture, so the step
// is then replayed once for the batch it was captured with. The replicas read their chunks from static buffers, one
// pair (features, targets) per device allocated before the capture; step() copies the batch's chunks into them
// (a whole batch cut by its device_rows or torch.chunk's rule) and replays: one graph launch on devices[0]'s compute
// stream covers every device (Note [Feeding a replay] in device_graph.h: the chunks are copied on their sources'
// compute streams, with no events of their own). The loss is written by the graph into a tensor of its own; step()
// returns a copy of it made on devices[0]'s compute stream, so a returned loss is never overwritten by a later step (or
// copies it into the caller's loss_out).
//
// Note [Host state of a captured step]: a replay must leave every piece of host state as the eager step would.
//  - The optimizer: capturing runs replayable_step() (or its parts), which changes no host state; each replay is
//    prepare_replay() (this step's learning rates and step factors into device memory, outside the graph), the
//    launch, then finish_replay() (Adam's step counts): so state_dict() and checkpoints count every step, and
//    set_lr or an LR schedule takes effect at the next replay (Note [Replayed optimizer steps] in optimizer.h).
//  - The reducer and the gradient views: the capture ran zero_grad and a whole overlapped step on the host, which
//    leaves them as an eager step does (buffers summed, step closed); a replay changes nothing there.
//  - The generator: the capture draws nothing; the graph records each draw on the devices (Dropout's masks:
//    Tensor::rand) and each replay reserves its values from the replicas' streams before the launch, as far as the
//    eager step would move them (Note [Random draws in captured graphs] in tandem/core/random.h). So replays draw
//    fresh masks, generator_state() and checkpoints count every step, and manual_seed or set_generator_state between
//    steps takes effect at the next replay. A step whose forward draws on the host (Tensor::randn, randint) cannot be
//    captured (below); the capture restores the generator state it found when it fails.
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
// Note [Falling back to the eager step]: where capture is impossible, step() runs the eager strategy instead, and
// fallback_reason() says why: options.capture false; CPU devices
// ("capture needs CUDA devices"); a batch with fewer rows than devices; an optimizer that cannot split its step;
// gradients staged bucket by bucket (DistributedOptions::zero_stage 2);
// max_graphs graphs held already; across processes, another process that cannot capture the step or whose capture
// failed (Note [Capturing across processes]); and a step that does host work capture cannot record (random draws
// made on the host, Tensor::randn or randint, which throw while a GPU's stream is captured; copies to the host such as
// label checks, for which CUDA invalidates the capture): the failing call throws. The capture is then ended cleanly
// (DeviceGraph::abort_capture), the reducer's step abandoned and the generator restored, so the failed attempt changes
// no state (nothing it recorded ran), the step runs eagerly, and the reason (with the error's text) is kept: every
// later step of that shape runs eagerly at once.
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
// model's reducer (its collective's functions), which outlives this TrainingStep by its
// contract, and by group_ here, declared before graphs_: so the graphs go first even where the model's owner is
// destroyed before this object.
//
// Requirements: the model and the optimizer outlive the TrainingStep. Not thread-safe; no other thread may use the
// devices while a step is captured. Across processes, every process makes its TrainingStep with the same options and
// calls step() at the same steps (as every collective requires).

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "tandem/comm/process_group.h"
#include "tandem/core/device_graph.h"
#include "tandem/core/dtype.h"
#include "tandem/core/shape.h"
#include "tandem/core/tensor.h"
#include "tandem/nn/loss.h"
#include "tandem/parallel/distributed.h"
#include "tandem/parallel/replicated.h"
#include "tandem/parallel/replicated_optimizer.h"
#include "tandem/parallel/sharded_optimizer.h"

namespace tandem::parallel {

// A training loss: a one-element tensor from a model's output and the targets of the same rows. For the step to match
// one device, it must be a mean over the rows (as nn::mse_loss is).
using LossFunction = std::function<Tensor(const Tensor& output, const Tensor& target)>;

// One batch for TrainingStep::step, given one of two ways:
//  - whole: `features` [n, ...] and `targets` [n, ...] (n >= 1) on any device, cut over the model's devices by the
//    step: chunk i of `device_rows[i]` rows to device i, or, without device_rows, torch.chunk's cut (chunks of
//    ceil(n / devices) rows, fewer chunks than devices when n is small), as comm::scatter cuts;
//  - placed: `inputs[i]` and `labels[i]` already on the model's device i, one chunk per device of a prefix of the
//    devices, each with at least one row and the same dtype and trailing dimensions as chunk 0 (a loader's batch,
//    trainers::DataLoader's with devices). A process of a group may have none: it has no rows in this global batch and
//    takes part in the gradient sum with zeros.
// `global_rows`: the rows of the batch every chunk's loss is weighted by (rows_i / global_rows); 0 means this batch's
// own rows, and across processes it must be the global batch's.
// `loss_out`: where the loss goes, a one-element float32 tensor on the model's first device (a slot of a per-epoch
// tensor of losses); undefined: a new tensor.
struct TrainingBatch {
  Tensor features{};
  Tensor targets{};
  std::vector<Tensor> inputs{};
  std::vector<Tensor> labels{};
  std::vector<int64_t> device_rows{};
  int64_t global_rows = 0;
  Tensor loss_out{};
};

struct TrainingStepOptions {
  bool capture = true;            // false: no step is captured
  int warmup_steps = 2;           // eager steps before the first capture; at least one is always taken
  size_t max_graphs = 4;          // graphs held at most (one per batch shape); further shapes run eagerly
  bool steps_in_backward = true;  // false: the optimizer steps only after backward, also where it could step during
  // Clips the summed gradients to this total 2-norm before each optimizer step, as
  // torch.nn.utils.clip_grad_norm_(model.parameters(), max_grad_norm) between backward and step: each replica scales
  // its flat gradient buffer (which holds every gradient, summed over every device of every process, so every
  // replica computes the same norm) by min(max_grad_norm / (norm + 1e-6), 1), on the device, captured with the step.
  // The optimizer then steps only after the whole reduction (steps in backward would update before the norm is
  // known). None: no clipping. Errors (constructor): a negative or NaN value.
  std::optional<double> max_grad_norm{};
};

// What a step ran.
enum class StepStrategy { Eager, StepsInBackward, Captured };

class TrainingStep {
 public:
  // One process on the model's devices. Errors: an empty loss function; warmup_steps < 0; an optimizer built over
  // another model.
  TrainingStep(ReplicatedModule& model, ReplicatedOptimizer& optimizer, LossFunction loss = nn::mse_loss,
               TrainingStepOptions options = {});
  // One process of the model's group, on the group's devices. Errors: those above; a model that does not sum its
  // gradients (DistributedOptions::reduction Average); a model with DistributedOptions::zero_stage > 0 (its
  // optimizer state is sharded: the overload below).
  TrainingStep(DistributedDataParallel& model, ReplicatedOptimizer& optimizer, LossFunction loss = nn::mse_loss,
               TrainingStepOptions options = {});
  // Note [Training steps over shards]: ZeRO stages 1 and 2, a model with DistributedOptions::zero_stage 1 or 2 and
  // its sharded optimizer. The backward reduce-scatters the buckets, max_grad_norm clips through
  // ShardedOptimizer::clip_grad_norm (the norm all-reduced over the shards), and the optimizer steps after the whole
  // reduction (never in backward) and all-gathers the parameters. All of it is captured as the replicated step is
  // (Note [Capturing a step]): the reduce-scatters, the norm's all-reduce and the all-gathers are recorded into the
  // graph with the kernels, and ShardedOptimizer::prepare_replay / finish_replay run around each replay; stage 2
  // steps run eagerly (Note [Falling back to the eager step]). Errors:
  // those above but zero_stage; an optimizer built over another model.
  TrainingStep(DistributedDataParallel& model, ShardedOptimizer& optimizer, LossFunction loss = nn::mse_loss,
               TrainingStepOptions options = {});
  ~TrainingStep();  // destroys the graphs (synchronizing their devices) before anything they captured
  TrainingStep(const TrainingStep&) = delete;
  TrainingStep& operator=(const TrainingStep&) = delete;

  // One optimizer step on `batch`. Returns the batch's mean loss, sum_i loss_i * rows_i / global_rows over this
  // process's chunks: a scalar on the model's first device (batch.loss_out when given), not read here (reading it
  // waits for the step); across processes, this process's part, whose sum over the processes is the global batch's
  // mean loss. Errors (each naming what is wrong): a batch given both ways or neither; features and targets with
  // different rows; device_rows that do not add up to the rows, or an entry below 1; more chunks than devices; chunks
  // of different numbers, on other devices, of another dtype or trailing shape than chunk 0, or without rows; no chunks
  // in one process; a global_rows below the batch's rows, or missing across processes; a loss that is not one
  // element; a loss_out that is not one float32 element on the first device; the optimizer's.
  Tensor step(const TrainingBatch& batch);
  // Note [Accumulating micro-batches]: gradient accumulation, one micro-batch of an optimizer step. Forward and
  // backward of `batch` inside the model's no_sync(): its gradients are added to each replica's own buffer (the first
  // accumulate() after a step zeroes the buffers first), with no reduction and no optimizer step. The next step() adds
  // its batch's gradients to them, reduces everything once (one sum per bucket over every device of every process),
  // clips once (max_grad_norm) and steps once. Each chunk's loss is weighted by rows_i / batch.global_rows, so for the
  // step to equal one step on the whole accumulated batch, every micro-batch and the step's batch must give the rows
  // of the whole accumulated batch as global_rows (across processes, its global rows). Runs eagerly, and so does the
  // step that follows (fallback_reason() says so): a captured step zeroes the gradients it starts from. Returns the
  // micro-batch's share of the accumulated batch's mean loss (sum_i loss_i * rows_i / global_rows), as step() does;
  // the shares of the micro-batches and the step add up to its mean loss. Errors: those of step().
  Tensor accumulate(const TrainingBatch& batch);
  // Whether gradients of accumulate() wait for the next step().
  bool accumulating() const { return accumulated_; }

  // Creates up front what the first steps would create lazily for the devices: streams, cuBLAS handles, peer access,
  // and the communicators of the in-process gradient sums (comm::warm_up).
  void warm_up_devices() const;

  StepStrategy strategy() const { return strategy_; }                    // what the last step ran
  bool captured() const { return strategy_ == StepStrategy::Captured; }  // whether the last step replayed a graph
  // Why the last step was not captured; "" when it was.
  const std::string& fallback_reason() const { return fallback_reason_; }
  // Whether the last step was one of the eager warm-up steps (Note [Capturing a step]).
  bool warming_up() const { return warming_up_; }
  // Why no step can be captured, whatever its batch ("" when steps may be): options.capture false, CPU devices, an
  // optimizer that cannot split its step (Note [Falling back to the eager step]).
  std::string blocker() const;
  size_t graphs() const { return graphs_.size(); }  // graphs held (one per distinct batch shape)
  size_t captures() const { return captures_; }     // graphs captured so far, those captured again included
  // The graph the last step replayed, for inspection (DeviceGraph::nodes, debug_dump); null when it ran eagerly.
  // Valid until the next step() or reset().
  const DeviceGraph* last_graph() const { return captured() ? last_graph_ : nullptr; }
  // Drops every graph and every remembered capture failure: the next step of each shape is captured again.
  void reset();

  ReplicatedModule& model() const { return model_; }
  // The replicated optimizer it steps. Errors: a step over a ShardedOptimizer.
  ReplicatedOptimizer& optimizer() const;
  ShardedOptimizer* sharded_optimizer() const { return sharded_; }  // null: the optimizer is replicated
  // The process group the gradients are summed over; null in one process.
  const std::shared_ptr<comm::ProcessGroup>& group() const { return group_; }
  const TrainingStepOptions& options() const { return options_; }

 private:
  // A batch checked and cut: each replica's chunk (views of a whole batch where it was given whole).
  struct Chunks {
    std::vector<Tensor> inputs;  // [replica]
    std::vector<Tensor> labels;  // [replica]
  };
  struct Key {
    Shape features, targets;  // of the whole of this process's batch
    DType features_dtype = DType::Float32, targets_dtype = DType::Float32;
    std::vector<int64_t> chunk_rows;  // each chunk's rows
    int64_t global_rows = 0;          // the loss weights' denominator
    std::vector<uint64_t> processes;  // across processes: every process's digest (Note [Capturing across processes])
    auto operator<=>(const Key&) const = default;
  };
  // One batch as step() got it, checked.
  struct Batch {
    const TrainingBatch* given = nullptr;
    int64_t rows = 0;  // this process's
    Key key;
  };
  // One batch shape's graph and the static tensors it reads and writes.
  struct Graph {
    std::vector<Tensor> inputs;   // [replica]: the chunk of features the graph reads
    std::vector<Tensor> labels;   // [replica]: the chunk of targets
    std::vector<Tensor> weights;  // [replica]: the loss weights, the seeds of the backwards
    Tensor loss_slots;            // [replica] on devices[0]: the replicas' losses (Note [Losses off the critical path])
    Tensor loss;                  // written by the graph
    DeviceGraph graph;            // declared last: destroyed first, before the tensors it uses
  };
  // What the processes agreed for a step (Note [Capturing across processes]).
  struct Agreement {
    std::string eager_reason;         // why every process runs the step eagerly; "" when it may be captured
    bool reset = false;               // some process's graphs were invalidated: every process drops its graphs
    std::vector<uint64_t> processes;  // every process's digest of its key
  };
  // How the replicas' forward and backward run, and where their losses go (training_step.cpp).
  using LossObserver = std::function<void(size_t replica, const Tensor& loss)>;
  struct Pass {
    StepForm form = StepForm::Eager;
    ReplicaThreads threads = ReplicaThreads::Workers;
    const std::vector<Tensor>* weights = nullptr;  // the backwards' seeds; null: made from the labels
    LossObserver on_loss{};                        // each replica's loss, detached and not weighted
    bool accumulate = false;                       // forward and backward only (Note [Accumulating micro-batches])
  };

  // Exactly one of optimizer and sharded is set.
  TrainingStep(ReplicatedModule& model, DistributedDataParallel* distributed, ReplicatedOptimizer* optimizer,
               ShardedOptimizer* sharded, LossFunction loss, TrainingStepOptions options);
  static void check_sums(const DistributedDataParallel& model);

  // ---- training_step.cpp: the batch and the eager strategies ----
  Batch checked(const TrainingBatch& batch) const;
  Batch checked_whole(const TrainingBatch& batch) const;
  Batch checked_placed(const TrainingBatch& batch) const;
  // The batch's chunk per replica: as given, or cut from the whole batch by key.chunk_rows (views).
  Chunks chunks_of(const Batch& batch) const;
  // The eager step (steps in backward where it may): the chunks scattered from a whole batch, forward, backward, the
  // reduction and the optimizer's step in `form`.
  // With `accumulate`, forward and backward only (accumulate()).
  Tensor eager(const Batch& batch, std::string reason, bool accumulate = false);
  // The replicas' forward, weighted losses and backward, the reduction, and the optimizer's step (Note [Optimizer
  // steps in backward] in steps_in_backward.h where it may); each replica's loss goes to pass.on_loss.
  void run_pass(const std::vector<Tensor>& inputs, const std::vector<Tensor>& labels, int64_t global_rows,
                const Pass& pass);
  bool may_step_in_backward() const;
  // The step's loss as the caller asked for it: `loss` itself, or copied into batch.loss_out.
  static Tensor deliver(const Batch& batch, const Tensor& loss);

  // ---- training_step_capture.cpp: the captured strategy ----
  Tensor run(const Batch& batch);
  Tensor replay(Graph& graph, const Batch& batch);
  // Captures the step for this batch's shape; null (and `reason` set) when the capture failed.
  std::unique_ptr<Graph> capture(const Batch& batch, std::string& reason);
  // Why this batch cannot be captured (fewer rows than devices); "" when it can.
  std::string rows_blocker(const Batch& batch) const;
  bool across_processes() const { return group_ != nullptr && group_->size() > 1; }
  // The processes' exchange before a step: this process can capture it unless `blocked`; its graphs were invalidated
  // when `invalidated`.
  Agreement agree(const Batch& batch, const std::string& blocked, bool invalidated);
  // Whether every process's capture of this step succeeded; `reason` becomes why not when another's failed.
  bool agree_on_capture(bool succeeded, std::string& reason);
  // What the graphs depend on besides their own tensors (Note [Host state of a captured step]): training modes,
  // the optimizer's state generation, and the addresses of every replica's parameters and gradient buffer.
  std::vector<uint64_t> fingerprint() const;

  ReplicatedModule& model_;
  DistributedDataParallel* distributed_;  // the model's DistributedDataParallel; null in one process
  ReplicatedOptimizer* optimizer_;        // null: sharded_ steps
  ShardedOptimizer* sharded_;             // null: optimizer_ steps
  ReplayableSteps& replayed_;             // whichever of the two steps: its eager and its split step
  LossFunction loss_;
  TrainingStepOptions options_;
  // The group of a DistributedDataParallel; before graphs_ (Note [Graphs before communicators]).
  std::shared_ptr<comm::ProcessGroup> group_;
  int eager_steps_ = 0;
  std::vector<uint64_t> fingerprint_;  // fingerprint() when the graphs were captured
  std::map<Key, std::unique_ptr<Graph>> graphs_;
  std::map<Key, std::string> failures_;  // shapes whose capture failed, with the reason
  size_t captures_ = 0;
  StepStrategy strategy_ = StepStrategy::Eager;
  const DeviceGraph* last_graph_ = nullptr;
  bool warming_up_ = false;
  bool accumulated_ = false;  // the buffers hold accumulate()'s local gradients, which the next step() adds to
  std::string fallback_reason_;
};

}  // namespace tandem::parallel
