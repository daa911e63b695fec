#include "tandem/parallel/captured_step.h"

#include <cstdint>
#include <exception>

#include "tandem/core/error.h"
#include "tandem/core/grad_mode.h"
#include "tandem/core/random.h"
#include "tandem/nn/module.h"

namespace tandem::parallel {
namespace {

constexpr const char* kName = "parallel::CapturedStep";

}  // namespace

CapturedStep::CapturedStep(ReplicatedModule& model, ReplicatedOptimizer& optimizer, LossFunction loss,
                           CaptureOptions options)
    : model_(model), optimizer_(optimizer), loss_(std::move(loss)), options_(options) {
  TANDEM_CHECK(loss_ != nullptr, kName, ": the loss function is empty");
  TANDEM_CHECK(options_.warmup_steps >= 0, kName, ": warmup_steps is ", options_.warmup_steps, " but expected >= 0");
}

CapturedStep::~CapturedStep() = default;

void CapturedStep::reset() {
  graphs_.clear();  // each DeviceGraph synchronizes its devices before it goes
  failures_.clear();
}

std::string CapturedStep::capture_blocker(const Tensor& features) const {
  if (!options_.enabled) return "capture is disabled (CaptureOptions::enabled is false)";
  for (const Device& device : model_.devices()) {
    if (!device.is_cuda()) return detail::concat("capture needs CUDA devices, but the model runs on ", device);
  }
  if (model_.spans_processes()) return "capture across processes is not supported yet";
  const auto devices = static_cast<int64_t>(model_.size());
  if (features.size(0) < devices) {
    return detail::concat("the batch has ", features.size(0), " rows for ", devices,
                          " devices, so some replica has no rows; capture needs every replica active");
  }
  if (!optimizer_.replayable()) {
    return "the optimizer cannot split its step for a replay (optim::Optimizer::replayable() is false)";
  }
  return "";
}

Tensor CapturedStep::step(const Tensor& features, const Tensor& targets) {
  check_batch_rows(features, targets, "parallel::CapturedStep::step");
  std::string blocker = capture_blocker(features);
  if (!blocker.empty()) return eager(features, targets, std::move(blocker));
  // Note [Capturing a step]: the warm-up creates the lazy state; at least one eager step is needed for that.
  if (eager_steps_ < std::max(options_.warmup_steps, 1)) {
    return eager(features, targets,
                 detail::concat("warm-up step ", eager_steps_ + 1, " of ", std::max(options_.warmup_steps, 1)));
  }
  // Note [Host state of a captured step]: graphs hold on to the modes and tensors they were captured with.
  std::vector<uint64_t> now = fingerprint();
  if (now != fingerprint_) {
    reset();
    fingerprint_ = std::move(now);
  }
  const Key key{features.shape(), targets.shape(), features.dtype(), targets.dtype()};
  const auto found = graphs_.find(key);
  if (found != graphs_.end()) return replay(*found->second, features, targets);
  const auto failed = failures_.find(key);
  if (failed != failures_.end()) return eager(features, targets, failed->second);
  if (graphs_.size() >= options_.max_graphs) {
    return eager(
        features, targets,
        detail::concat(graphs_.size(), " graphs are held already (CaptureOptions::max_graphs is ", options_.max_graphs,
                       "), so the batch of shape ", to_string(features.shape()), " runs eagerly"));
  }
  std::string reason;
  std::unique_ptr<Graph> graph = capture(features, targets, reason);
  if (graph == nullptr) {
    failures_.emplace(key, reason);
    return eager(features, targets, std::move(reason));
  }
  Graph& captured = *graphs_.emplace(key, std::move(graph)).first->second;
  return replay(captured, features, targets);  // the capture ran nothing
}

std::vector<uint64_t> CapturedStep::fingerprint() const {
  std::vector<uint64_t> values = {nn::Module::training_mode_generation(), optimizer_.state_generation()};
  const auto address = [](const Tensor& t) {
    return t.defined() ? static_cast<uint64_t>(reinterpret_cast<uintptr_t>(t.data_ptr())) : 0;
  };
  for (size_t d = 0; d < model_.size(); ++d) {
    for (const Tensor& parameter : model_.replicas()[d]->parameters()) values.push_back(address(parameter));
    values.push_back(address(model_.gradient_buffer(d)));
  }
  return values;
}

Tensor CapturedStep::eager(const Tensor& features, const Tensor& targets, std::string reason) {
  captured_ = false;
  fallback_reason_ = std::move(reason);
  ++eager_steps_;
  return data_parallel_step(model_, optimizer_, features, targets, loss_);
}

std::unique_ptr<CapturedStep::Graph> CapturedStep::capture(const Tensor& features, const Tensor& targets,
                                                           std::string& reason) {
  const std::vector<Device>& devices = model_.devices();
  auto graph = std::make_unique<Graph>();
  {
    NoGradGuard no_grad;
    const std::vector<Tensor> feature_chunks = features.chunk(static_cast<int64_t>(devices.size()), 0);
    const std::vector<Tensor> target_chunks = targets.chunk(static_cast<int64_t>(devices.size()), 0);
    for (size_t i = 0; i < feature_chunks.size(); ++i) {
      graph->inputs.push_back(Tensor::empty(feature_chunks[i].shape(), features.dtype(), devices[i]));
      graph->labels.push_back(Tensor::empty(target_chunks[i].shape(), targets.dtype(), devices[i]));
    }
    graph->weights = loss_weights(graph->labels, features.size(0));  // outside the graph: no fill per replay
  }
  // Outside the capture: the optimizer's device buffers are created by their first upload.
  optimizer_.prepare_replay();
  const GeneratorState generator = generator_state();
  try {
    graph->graph.begin_capture(devices);
    const std::vector<Tensor> losses = weighted_forward_backward(model_, graph->inputs, graph->labels, features.size(0),
                                                                 loss_, ReplicaThreads::Caller, graph->weights);
    optimizer_.replayable_step();
    graph->loss = sum_losses(losses, devices.front());
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

Tensor CapturedStep::replay(Graph& graph, const Tensor& features, const Tensor& targets) {
  {
    NoGradGuard no_grad;
    const std::vector<Tensor> feature_chunks = features.chunk(static_cast<int64_t>(graph.inputs.size()), 0);
    const std::vector<Tensor> target_chunks = targets.chunk(static_cast<int64_t>(graph.labels.size()), 0);
    for (size_t i = 0; i < graph.inputs.size(); ++i) {
      graph.inputs[i].copy_(feature_chunks[i]);
      graph.labels[i].copy_(target_chunks[i]);
    }
  }
  optimizer_.prepare_replay();  // Note [Host state of a captured step]
  graph.graph.replay();
  optimizer_.finish_replay();
  captured_ = true;
  fallback_reason_.clear();
  return graph.loss.clone();  // on devices[0]'s compute stream, after the replay
}

}  // namespace tandem::parallel
