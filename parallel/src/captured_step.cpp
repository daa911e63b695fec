#include "tandem/parallel/captured_step.h"

#include <algorithm>
#include <cstdint>
#include <exception>

#include "tandem/core/error.h"
#include "tandem/core/fnv1a.h"
#include "tandem/core/grad_mode.h"
#include "tandem/core/random.h"
#include "tandem/core/source_stream_copy.h"
#include "tandem/nn/module.h"

namespace tandem::parallel {
namespace {

constexpr const char* kCapturedStep = "parallel::CapturedStep";

// The shape of the whole batch that `chunks` were cut from: chunk 0's with the rows of all; every chunk on its device
// (devices[i]) with chunk 0's dtype and trailing dimensions.
Shape whole_shape(const std::vector<Tensor>& chunks, const std::vector<Device>& devices, const char* what,
                  const char* caller) {
  Shape shape = chunks.front().shape();
  shape[0] = 0;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const Tensor& chunk = chunks[i];
    TANDEM_CHECK(chunk.device() == devices[i], kCapturedStep, "::", caller, ": ", what, " chunk ", i, " is on ",
                 chunk.device(), " but expected the model's device ", devices[i]);
    Shape rest = chunk.shape();
    rest[0] = 0;
    TANDEM_CHECK(chunk.dtype() == chunks.front().dtype() && rest == shape, kCapturedStep, "::", caller, ": ", what,
                 " chunk ", i, " has shape ", to_string(chunk.shape()), " and dtype ", chunk.dtype(),
                 " but chunk 0 has ", to_string(chunks.front().shape()), " and ", chunks.front().dtype(),
                 "; expected the same beyond the rows");
  }
  for (const Tensor& chunk : chunks) shape[0] += chunk.size(0);
  return shape;
}

// Throws unless the chunks' rows are torch.chunk's cut of their sum over `devices` devices (as the static buffers of
// a graph captured from a whole batch of that many rows are).
void check_chunk_rows(const std::vector<Tensor>& chunks, int64_t rows, size_t devices) {
  TANDEM_CHECK(rows >= 1, kCapturedStep, "::step_chunks: the batch has no rows; expected at least one");
  const int64_t size = (rows + static_cast<int64_t>(devices) - 1) / static_cast<int64_t>(devices);
  const int64_t count = size == 0 ? 1 : (rows + size - 1) / size;
  TANDEM_CHECK(static_cast<int64_t>(chunks.size()) == count, kCapturedStep, "::step_chunks: got ", chunks.size(),
               " chunks of ", rows, " rows but torch.chunk cuts them into ", count, " for ", devices, " devices");
  for (size_t i = 0; i < chunks.size(); ++i) {
    const int64_t expected = std::min(size, rows - static_cast<int64_t>(i) * size);
    TANDEM_CHECK(chunks[i].size(0) == expected, kCapturedStep, "::step_chunks: chunk ", i, " has ", chunks[i].size(0),
                 " rows but torch.chunk's cut of ", rows, " rows over ", devices, " devices gives it ", expected);
  }
}

// Note [Capturing across processes] in captured_step.h: one process's word in the exchange before a step: whether it
// can capture the step, whether its graphs were invalidated, and a digest of its batch's key (FNV-1a over its
// fields, the same in every process of the job, which runs one program).
constexpr uint64_t kCanCapture = uint64_t{1} << 63;
constexpr uint64_t kInvalidated = uint64_t{1} << 62;
constexpr uint64_t kDigestBits = kInvalidated - 1;
constexpr const char* kExchange = "parallel::CapturedStep: the processes' exchange before a captured training step";
constexpr const char* kCaptureExchange =
    "parallel::CapturedStep: the processes' exchange after capturing a training step";

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

CapturedStep::CapturedStep(ReplicatedModule& model, ReplicatedOptimizer& optimizer, LossFunction loss,
                           CaptureOptions options)
    : model_(model), optimizer_(optimizer), loss_(std::move(loss)), options_(options) {
  TANDEM_CHECK(loss_ != nullptr, kCapturedStep, ": the loss function is empty");
  TANDEM_CHECK(options_.warmup_steps >= 0, kCapturedStep, ": warmup_steps is ", options_.warmup_steps,
               " but expected >= 0");
  if (model_.spans_processes() && model_.group() != nullptr && model_.group()->size() > 1) group_ = model_.group();
}

CapturedStep::~CapturedStep() = default;

void CapturedStep::reset() {
  captured_ = false;
  last_graph_ = nullptr;
  graphs_.clear();  // each DeviceGraph synchronizes its devices before it goes
  failures_.clear();
}

std::string CapturedStep::blocker() const {
  if (!options_.enabled) return "capture is disabled (CaptureOptions::enabled is false)";
  for (const Device& device : model_.devices()) {
    if (!device.is_cuda()) return detail::concat("capture needs CUDA devices, but the model runs on ", device);
  }
  if (!optimizer_.replayable()) {
    return "the optimizer cannot split its step for a replay (optim::Optimizer::replayable() is false)";
  }
  return "";
}

std::string CapturedStep::rows_blocker(const Batch& batch) const {
  const auto devices = static_cast<int64_t>(model_.size());
  if (batch.rows < devices) {
    return detail::concat("the batch has ", batch.rows, " rows for ", devices,
                          " devices, so some replica has no rows; capture needs every replica active");
  }
  return "";
}

CapturedStep::Agreement CapturedStep::agree(const Batch& batch, const std::string& blocked, bool invalidated) {
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
          !blocked.empty() ? blocked
                           : detail::concat("process ", rank,
                                            " cannot capture this step (its shard has fewer rows than its devices), so "
                                            "every process runs it eagerly");
    }
  }
  return agreed;
}

bool CapturedStep::agree_on_capture(bool succeeded, std::string& reason) {
  const std::vector<uint64_t> words = group_->exchange(succeeded ? 1 : 0, kCaptureExchange);
  for (size_t rank = 0; rank < words.size(); ++rank) {
    if (words[rank] != 0) continue;
    if (reason.empty()) {
      reason = detail::concat("the capture of the step failed in process ", rank, ", so every process runs it eagerly");
    }
    return false;
  }
  return true;
}

CapturedStep::Batch CapturedStep::whole_batch(const Tensor& features, const Tensor& targets) const {
  check_batch_rows(features, targets, "parallel::CapturedStep::step");
  return {.features = &features,
          .targets = &targets,
          .rows = features.size(0),
          .key = {features.shape(), targets.shape(), features.dtype(), targets.dtype(), {}, features.size(0), {}}};
}

CapturedStep::Batch CapturedStep::chunked_batch(const std::vector<Tensor>& inputs,
                                                const std::vector<Tensor>& labels) const {
  TANDEM_CHECK(!inputs.empty() && inputs.size() == labels.size() && inputs.size() <= model_.size(), kCapturedStep,
               "::step_chunks: got ", inputs.size(), " chunks of features and ", labels.size(),
               " of targets but expected as many, from 1 to the model's ", model_.size(), " devices");
  for (size_t i = 0; i < inputs.size(); ++i)
    check_batch_rows(inputs[i], labels[i], "parallel::CapturedStep::step_chunks");
  const Shape features = whole_shape(inputs, model_.devices(), "features", "step_chunks");
  const Shape targets = whole_shape(labels, model_.devices(), "targets", "step_chunks");
  check_chunk_rows(inputs, features[0], model_.size());
  return {.inputs = &inputs,
          .labels = &labels,
          .rows = features[0],
          .key = {features, targets, inputs.front().dtype(), labels.front().dtype(), {}, features[0], {}}};
}

CapturedStep::Batch CapturedStep::shard_batch(const std::vector<Tensor>& inputs, const std::vector<Tensor>& labels,
                                              int64_t global_rows) const {
  TANDEM_CHECK(inputs.size() == labels.size() && inputs.size() <= model_.size(), kCapturedStep, "::step_shard: got ",
               inputs.size(), " chunks of features and ", labels.size(), " of targets but expected as many, up to the ",
               "model's ", model_.size(), " devices");
  TANDEM_CHECK(!inputs.empty() || model_.spans_processes(), kCapturedStep,
               "::step_shard: got no chunks, but a model that is not reduced across processes needs at least one");
  Batch batch;
  batch.inputs = &inputs;
  batch.labels = &labels;
  for (size_t i = 0; i < inputs.size(); ++i) {
    check_batch_rows(inputs[i], labels[i], "parallel::CapturedStep::step_shard");
    TANDEM_CHECK(inputs[i].size(0) >= 1, kCapturedStep, "::step_shard: chunk ", i,
                 " has no rows; expected at least one");
    batch.key.chunk_rows.push_back(inputs[i].size(0));
    batch.rows += inputs[i].size(0);
  }
  TANDEM_CHECK(global_rows >= std::max<int64_t>(batch.rows, 1), kCapturedStep, "::step_shard: global_rows is ",
               global_rows, " but this process alone has ", batch.rows,
               " rows (expected at least those, and at least 1)");
  batch.key.global_rows = global_rows;
  if (!inputs.empty()) {
    batch.key.features = whole_shape(inputs, model_.devices(), "features", "step_shard");
    batch.key.targets = whole_shape(labels, model_.devices(), "targets", "step_shard");
    batch.key.features_dtype = inputs.front().dtype();
    batch.key.targets_dtype = labels.front().dtype();
  }
  return batch;
}

void CapturedStep::check_loss_out(const Tensor& loss_out, const char* caller) const {
  const Device device = model_.devices().front();
  TANDEM_CHECK(
      loss_out.defined() && loss_out.numel() == 1 && loss_out.dtype() == DType::Float32 && loss_out.device() == device,
      kCapturedStep, "::", caller, ": loss_out is ",
      loss_out.defined() ? detail::concat("of shape ", to_string(loss_out.shape()), " and dtype ", loss_out.dtype(),
                                          " on ", loss_out.device())
                         : std::string("undefined"),
      " but expected one float32 element on ", device);
}

Tensor CapturedStep::deliver(const Batch& batch, const Tensor& loss) {
  if (batch.loss_out == nullptr) return loss;
  NoGradGuard no_grad;
  Tensor out = *batch.loss_out;
  out.copy_(loss.reshape(out.shape()));  // on devices[0]'s compute stream
  return out;
}

Tensor CapturedStep::step(const Tensor& features, const Tensor& targets) { return run(whole_batch(features, targets)); }

Tensor CapturedStep::step(const Tensor& features, const Tensor& targets, const Tensor& loss_out) {
  Batch batch = whole_batch(features, targets);
  check_loss_out(loss_out, "step");
  batch.loss_out = &loss_out;
  return run(batch);
}

Tensor CapturedStep::step_chunks(const std::vector<Tensor>& inputs, const std::vector<Tensor>& labels) {
  return run(chunked_batch(inputs, labels));
}

Tensor CapturedStep::step_chunks(const std::vector<Tensor>& inputs, const std::vector<Tensor>& labels,
                                 const Tensor& loss_out) {
  Batch batch = chunked_batch(inputs, labels);
  check_loss_out(loss_out, "step_chunks");
  batch.loss_out = &loss_out;
  return run(batch);
}

Tensor CapturedStep::step_shard(const std::vector<Tensor>& inputs, const std::vector<Tensor>& labels,
                                int64_t global_rows) {
  return run(shard_batch(inputs, labels, global_rows));
}

Tensor CapturedStep::step_shard(const std::vector<Tensor>& inputs, const std::vector<Tensor>& labels,
                                int64_t global_rows, const Tensor& loss_out) {
  Batch batch = shard_batch(inputs, labels, global_rows);
  check_loss_out(loss_out, "step_shard");
  batch.loss_out = &loss_out;
  return run(batch);
}

Tensor CapturedStep::run(const Batch& batch) {
  // Across processes, a batch without a row for every device is decided with the others (after the warm-up, which
  // every process takes alike); in one process it runs eagerly at once.
  std::string blocked = blocker();
  if (blocked.empty() && !across_processes()) blocked = rows_blocker(batch);
  if (!blocked.empty()) return eager(batch, std::move(blocked));
  // Note [Capturing a step]: the warm-up creates the lazy state; at least one eager step is needed for that.
  if (eager_steps_ < std::max(options_.warmup_steps, 1)) {
    Tensor loss =
        eager(batch, detail::concat("warm-up step ", eager_steps_ + 1, " of ", std::max(options_.warmup_steps, 1)));
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
    return eager(batch, detail::concat(graphs_.size(), " graphs are held already (CaptureOptions::max_graphs is ",
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
  Graph& captured = *graphs_.emplace(key, std::move(graph)).first->second;
  return replay(captured, batch);  // the capture ran nothing
}

std::vector<uint64_t> CapturedStep::fingerprint() const {
  std::vector<uint64_t> values = {optimizer_.state_generation()};
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

Tensor CapturedStep::eager(const Batch& batch, std::string reason) {
  captured_ = false;
  warming_up_ = false;
  fallback_reason_ = std::move(reason);
  ++eager_steps_;
  if (batch.inputs != nullptr) {
    return deliver(batch, placed_data_parallel_step(model_, optimizer_, *batch.inputs, *batch.labels,
                                                    batch.key.global_rows, loss_));
  }
  return deliver(batch, data_parallel_step(model_, optimizer_, *batch.features, *batch.targets, loss_));
}

std::pair<std::vector<Tensor>, std::vector<Tensor>> CapturedStep::chunks(const Batch& batch) const {
  if (batch.inputs != nullptr) return {*batch.inputs, *batch.labels};
  NoGradGuard no_grad;
  const auto devices = static_cast<int64_t>(model_.size());
  return {batch.features->chunk(devices, 0), batch.targets->chunk(devices, 0)};
}

// Note [Losses off the critical path]: the eager step sums the weighted losses after the optimizer's step
// (sum_losses: a peer copy through Tensor::to, which orders both devices both ways, and an add on devices[0]).
// Captured that way, the graph would run the loss work after the all-reduce, and the graph's end would wait for it.
// The capture issues it as each replica's loss appears instead (observed_forward_backward), before the replica's
// backward: replica 0's loss is kept; replica i's is copied, on its own device's compute stream, into slot i of a
// buffer on devices[0] allocated before the capture (copy_on_source_stream: devices[0] waits for the copy, and
// nothing on device i waits for devices[0], whose stream then holds replica 0's backward); with the last replica's
// loss, the weights and the sum are issued on devices[0], where they run beside the other replicas' backwards and
// the all-reduce. So nothing but the all-reduce and the optimizer follows the last backward kernel, and device i
// runs no loss kernel at all. The sum is the eager one's: the same products of the same floats (weighted_losses, on
// devices[0] instead of device i), added in the same order (sum_losses). With one replica the loss itself is the
// result: no kernel.
std::unique_ptr<CapturedStep::Graph> CapturedStep::capture(const Batch& batch, std::string& reason) {
  const std::vector<Device>& devices = model_.devices();
  auto graph = std::make_unique<Graph>();
  {
    NoGradGuard no_grad;
    const auto [feature_chunks, target_chunks] = chunks(batch);
    for (size_t i = 0; i < feature_chunks.size(); ++i) {
      graph->inputs.push_back(Tensor::empty(feature_chunks[i].shape(), batch.key.features_dtype, devices[i]));
      graph->labels.push_back(Tensor::empty(target_chunks[i].shape(), batch.key.targets_dtype, devices[i]));
    }
    graph->weights = loss_weights(graph->labels, batch.key.global_rows);  // outside the graph: no fill per replay
    if (graph->inputs.size() > 1) {
      graph->loss_slots = Tensor::empty({static_cast<int64_t>(graph->inputs.size())}, DType::Float32, devices.front());
    }
  }
  // Outside the capture: the optimizer's device buffers are created by their first upload.
  optimizer_.prepare_replay();
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
        graph->loss = sum_losses(weighted_losses(losses, graph->labels, batch.key.global_rows), devices[0]);
      }
    };
    weighted_training_step(model_, optimizer_, graph->inputs, graph->labels, batch.key.global_rows, loss_,
                           StepForm::Replayable, ReplicaThreads::Caller, graph->weights, gather);
    graph->graph.end_capture();
  } catch (const std::exception& e) {
    // Note [Falling back to the eager step]: the capture ends first, so that the reducer's joins and every later
    // call on the streams run outside it.
    graph->graph.abort_capture();
    model_.abandon_step();
    set_generator_state(generator);
    reason = detail::concat("the capture of the step failed, so it runs eagerly: ", e.what());
    return nullptr;
  }
  return graph;
}

Tensor CapturedStep::replay(Graph& graph, const Batch& batch) {
  {
    NoGradGuard no_grad;
    const auto [feature_chunks, target_chunks] = chunks(batch);
    std::vector<DeviceGraph::Feed> feeds;
    feeds.reserve(2 * graph.inputs.size());
    for (size_t i = 0; i < graph.inputs.size(); ++i) {
      feeds.push_back({.from = feature_chunks[i], .to = graph.inputs[i]});
      feeds.push_back({.from = target_chunks[i], .to = graph.labels[i]});
    }
    optimizer_.prepare_replay();  // Note [Host state of a captured step]
    graph.graph.replay(feeds);    // Note [Feeding a replay] in device_graph.h
    if (across_processes()) group_->watch_replay("captured training step");  // Note [Capturing across processes]
  }
  optimizer_.finish_replay();
  captured_ = true;
  last_graph_ = &graph.graph;
  warming_up_ = false;
  fallback_reason_.clear();
  // On devices[0]'s compute stream, after the replay.
  return batch.loss_out != nullptr ? deliver(batch, graph.loss) : graph.loss.clone();
}

}  // namespace tandem::parallel
