// TrainingStep's captured strategy: Note [Capturing a step] and the Notes after it in training_step.h.

#include <algorithm>
#include <cstdint>
#include <exception>

#include "replica_losses.h"
#include "tandem/core/error.h"
#include "tandem/core/fnv1a.h"
#include "tandem/core/grad_mode.h"
#include "tandem/core/random.h"
#include "tandem/core/source_stream_copy.h"
#include "tandem/nn/module.h"
#include "tandem/parallel/training_step.h"

namespace tandem::parallel {
namespace {

// Note [Capturing across processes] in training_step.h: one process's word in the exchange before a step: whether it
// can capture the step, whether its graphs were invalidated, and a digest of its batch's key (FNV-1a over its
// fields, the same in every process of the job, which runs one program).
constexpr uint64_t kCanCapture = uint64_t{1} << 63;
constexpr uint64_t kInvalidated = uint64_t{1} << 62;
constexpr uint64_t kDigestBits = kInvalidated - 1;
constexpr const char* kExchange = "parallel::TrainingStep: the processes' exchange before a captured training step";
constexpr const char* kCaptureExchange =
    "parallel::TrainingStep: the processes' exchange after capturing a training step";

class Digest {
 public:
  void add(uint64_t value) { hash_.add_word(value); }
  void add(const Shape& shape) {
    add(shape.size());
    for (const int64_t size : shape) add(static_cast<uint64_t>(size));
  }
  uint64_t value() const { return hash_.value() & kDigestBits; }

 private:
  Fnv1a hash_;
};

}  // namespace

void TrainingStep::reset() {
  strategy_ = StepStrategy::Eager;
  last_graph_ = nullptr;
  graphs_.clear();  // each DeviceGraph synchronizes its devices before it goes
  failures_.clear();
}

std::string TrainingStep::blocker() const {
  if (!options_.capture) return "capture is off (TrainingStepOptions::capture is false)";
  for (const Device& device : model_.devices()) {
    if (!device.is_cuda())
      return ::tandem::detail::concat("capture needs CUDA devices, but the model runs on ", device);
  }
  if (!replayed_.replayable()) {
    return "the optimizer cannot split its step for a replay (optim::Optimizer::replayable() is false)";
  }
  if (model_.gradient_reducer().collective().shards_gradients) {
    return "the gradients are staged bucket by bucket (DistributedOptions::zero_stage 2) in tensors allocated and "
           "released during backward, which a captured graph does not replay; stage 2 steps run eagerly";
  }
  if (model_.spans_processes() && group_ == nullptr) {
    return "the model's gradients are summed across processes without a group that the processes can agree "
           "through; capture needs the TrainingStep made over the DistributedDataParallel";
  }
  return "";
}

std::string TrainingStep::rows_blocker(const Batch& batch) const {
  const auto devices = static_cast<int64_t>(model_.size());
  if (batch.rows < devices) {
    return ::tandem::detail::concat("the batch has ", batch.rows, " rows for ", devices,
                                    " devices, so some replica has no rows; capture needs every replica active");
  }
  return "";
}

TrainingStep::Agreement TrainingStep::agree(const Batch& batch, const std::string& blocked, bool invalidated) {
  Digest digest;
  const Key& key = batch.key;
  digest.add(key.features);
  digest.add(key.targets);
  digest.add(static_cast<uint64_t>(key.features_dtype));
  digest.add(static_cast<uint64_t>(key.targets_dtype));
  digest.add(key.chunk_rows.size());
  for (const int64_t rows : key.chunk_rows) digest.add(static_cast<uint64_t>(rows));
  digest.add(static_cast<uint64_t>(key.global_rows));
  const uint64_t mine = digest.value() | (blocked.empty() ? kCanCapture : 0) | (invalidated ? kInvalidated : 0);
  const std::vector<uint64_t> words = group_->exchange(mine, kExchange);
  Agreement agreed;
  for (size_t rank = 0; rank < words.size(); ++rank) {
    agreed.reset = agreed.reset || (words[rank] & kInvalidated) != 0;
    agreed.processes.push_back(words[rank] & kDigestBits);
    if (agreed.eager_reason.empty() && (words[rank] & kCanCapture) == 0) {
      agreed.eager_reason =
          !blocked.empty()
              ? blocked
              : ::tandem::detail::concat("process ", rank,
                                         " cannot capture this step (its shard has fewer rows than its devices), so "
                                         "every process runs it eagerly");
    }
  }
  return agreed;
}

bool TrainingStep::agree_on_capture(bool succeeded, std::string& reason) {
  const std::vector<uint64_t> words = group_->exchange(succeeded ? 1 : 0, kCaptureExchange);
  for (size_t rank = 0; rank < words.size(); ++rank) {
    if (words[rank] != 0) continue;
    if (reason.empty()) {
      reason = ::tandem::detail::concat("the capture of the step failed in process ", rank,
                                        ", so every process runs it eagerly");
    }
    return false;
  }
  return true;
}

Tensor TrainingStep::run(const Batch& batch) {
  // Across processes, a batch without a row for every device is decided with the others (after the warm-up, which
  // every process takes alike); in one process it runs eagerly at once.
  std::string blocked = blocker();
  if (blocked.empty() && !across_processes()) blocked = rows_blocker(batch);
  if (!blocked.empty()) return eager(batch, std::move(blocked));
  // Note [Capturing a step]: the warm-up creates the lazy state; at least one eager step is needed for that.
  if (eager_steps_ < std::max(options_.warmup_steps, 1)) {
    Tensor loss = eager(
        batch, ::tandem::detail::concat("warm-up step ", eager_steps_ + 1, " of ", std::max(options_.warmup_steps, 1)));
    warming_up_ = true;
    return loss;
  }
  // Note [Host state of a captured step]: graphs hold on to the modes and tensors they were captured with.
  std::vector<uint64_t> now = fingerprint();
  bool invalidated = now != fingerprint_;
  Key key = batch.key;
  std::string eager_reason;
  if (across_processes()) {  // Note [Capturing across processes]
    Agreement agreed = agree(batch, rows_blocker(batch), invalidated);
    invalidated = agreed.reset;
    eager_reason = std::move(agreed.eager_reason);
    key.processes = std::move(agreed.processes);
  }
  if (invalidated) reset();
  fingerprint_ = std::move(now);
  if (!eager_reason.empty()) return eager(batch, std::move(eager_reason));
  const auto found = graphs_.find(key);
  if (found != graphs_.end()) return replay(*found->second, batch);
  const auto failed = failures_.find(key);
  if (failed != failures_.end()) return eager(batch, failed->second);
  if (graphs_.size() >= options_.max_graphs) {
    return eager(
        batch, ::tandem::detail::concat(graphs_.size(), " graphs are held already (TrainingStepOptions::max_graphs is ",
                                        options_.max_graphs, "), so the batch of shape ", to_string(key.features),
                                        " runs eagerly"));
  }
  std::string reason;
  std::unique_ptr<Graph> graph = capture(batch, reason);
  // Note [Capturing across processes]: a graph is kept only where every process's capture succeeded.
  if (across_processes() && !agree_on_capture(graph != nullptr, reason)) graph.reset();
  if (graph == nullptr) {
    failures_.emplace(key, reason);
    return eager(batch, std::move(reason));
  }
  ++captures_;
  Graph& captured_graph = *graphs_.emplace(key, std::move(graph)).first->second;
  return replay(captured_graph, batch);  // the capture ran nothing
}

std::vector<uint64_t> TrainingStep::fingerprint() const {
  std::vector<uint64_t> values = {replayed_.state_generation()};
  for (const bool training : model_.module()->training_modes()) values.push_back(training ? 1 : 0);
  const auto address = [](const Tensor& t) {
    return t.defined() ? static_cast<uint64_t>(reinterpret_cast<uintptr_t>(t.data_ptr())) : 0;
  };
  for (size_t d = 0; d < model_.size(); ++d) {
    for (const Tensor& parameter : model_.replicas()[d]->parameters()) values.push_back(address(parameter));
    values.push_back(address(model_.gradient_buffer(d)));
  }
  return values;
}

// Note [Losses off the critical path]: the eager step sums the weighted losses after the optimizer's step
// (sum_losses: a peer copy through Tensor::to, which orders both devices both ways, and an add on devices[0]).
// Captured that way, the graph would run the loss work after the all-reduce, and the graph's end would wait for it.
// The capture issues it as each replica's loss appears instead (Pass::on_loss), before the replica's backward:
// replica 0's loss is kept; replica i's is copied, on its own device's compute stream, into slot i of a buffer on
// devices[0] allocated before the capture (copy_on_source_stream: devices[0] waits for the copy, and nothing on
// device i waits for devices[0], whose stream then holds replica 0's backward); with the last replica's loss, the
// weights and the sum are issued on devices[0], where they run beside the other replicas' backwards and the
// all-reduce. So nothing but the all-reduce and the optimizer follows the last backward kernel, and device i runs no
// loss kernel at all. The sum is the eager one's: the same products of the same floats (weighted_losses, on
// devices[0] instead of device i), added in the same order (sum_losses). With one replica the loss itself is the
// result: no kernel.
std::unique_ptr<TrainingStep::Graph> TrainingStep::capture(const Batch& batch, std::string& reason) {
  const std::vector<Device>& devices = model_.devices();
  const int64_t global_rows = batch.key.global_rows;
  auto graph = std::make_unique<Graph>();
  {
    NoGradGuard no_grad;
    const Chunks chunks = chunks_of(batch);
    for (size_t i = 0; i < chunks.inputs.size(); ++i) {
      graph->inputs.push_back(Tensor::empty(chunks.inputs[i].shape(), batch.key.features_dtype, devices[i]));
      graph->labels.push_back(Tensor::empty(chunks.labels[i].shape(), batch.key.targets_dtype, devices[i]));
    }
    graph->weights = detail::loss_weights(graph->labels, global_rows);  // outside the graph: no fill per replay
    if (graph->inputs.size() > 1) {
      graph->loss_slots = Tensor::empty({static_cast<int64_t>(graph->inputs.size())}, DType::Float32, devices.front());
    }
  }
  // Outside the capture: the optimizer's device buffers are created by their first upload.
  replayed_.prepare_replay();
  const GeneratorState generator = generator_state();
  try {
    graph->graph.begin_capture(devices);
    // Note [Losses off the critical path]: the replicas run one after another on this thread, so replica i's loss
    // arrives after replica i - 1's backward was issued and before replica i's.
    const size_t replicas = graph->inputs.size();
    std::vector<Tensor> losses(replicas);  // on devices[0]: replica 0's, then the slots of the others
    const LossObserver gather = [&](size_t i, const Tensor& loss) {
      NoGradGuard no_grad;
      if (i == 0) {
        losses[0] = loss;
      } else {
        const Tensor slot = graph->loss_slots.narrow(0, static_cast<int64_t>(i), 1);
        copy_on_source_stream(loss.reshape({1}), slot);
        losses[i] = slot.reshape(loss.shape());
      }
      if (i + 1 == replicas) {
        graph->loss = detail::sum_losses(detail::weighted_losses(losses, graph->labels, global_rows), devices[0]);
      }
    };
    run_pass(graph->inputs, graph->labels, global_rows,
             {.form = StepForm::Replayable,
              .threads = ReplicaThreads::Caller,
              .weights = &graph->weights,
              .on_loss = gather});
    graph->graph.end_capture();
  } catch (const std::exception& e) {
    // Note [Falling back to the eager step]: the capture ends first, so that the reducer's joins and every later
    // call on the streams run outside it.
    graph->graph.abort_capture();
    model_.abandon_step();
    set_generator_state(generator);
    reason = ::tandem::detail::concat("the capture of the step failed, so it runs eagerly: ", e.what());
    return nullptr;
  }
  return graph;
}

Tensor TrainingStep::replay(Graph& graph, const Batch& batch) {
  {
    NoGradGuard no_grad;
    const Chunks chunks = chunks_of(batch);
    std::vector<DeviceGraph::Feed> feeds;
    feeds.reserve(2 * graph.inputs.size());
    for (size_t i = 0; i < graph.inputs.size(); ++i) {
      feeds.push_back({.from = chunks.inputs[i], .to = graph.inputs[i]});
      feeds.push_back({.from = chunks.labels[i], .to = graph.labels[i]});
    }
    replayed_.prepare_replay();  // Note [Host state of a captured step]
    graph.graph.replay(feeds);   // Note [Feeding a replay] in device_graph.h
    if (across_processes()) group_->watch_replay("captured training step");  // Note [Capturing across processes]
  }
  replayed_.finish_replay();
  strategy_ = StepStrategy::Captured;
  last_graph_ = &graph.graph;
  warming_up_ = false;
  fallback_reason_.clear();
  // On devices[0]'s compute stream, after the replay.
  return batch.given->loss_out.defined() ? deliver(batch, graph.loss) : graph.loss.clone();
}

}  // namespace tandem::parallel
