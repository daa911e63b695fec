#include <atomic>
#include <mutex>

#include "raw_ops.h"
#include "tandem/core/autograd.h"
#include "tandem/core/error.h"

namespace tandem::autograd {

namespace {
std::atomic<uint64_t> next_sequence_nr{0};
std::mutex accumulator_mutex;  // leaves may be used by several worker threads at once
}  // namespace

Node::Node() : sequence_nr_(next_sequence_nr.fetch_add(1, std::memory_order_relaxed)) {}

std::vector<Tensor> Node::evaluate(std::vector<Tensor>&& grad_outputs, bool retain_graph,
                                   detail::LeafWrites& leaf_writes) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Tensor> grads = apply_writing_leaves(std::move(grad_outputs), leaf_writes);
  if (!retain_graph) release_saved_tensors();
  return grads;
}

uint32_t Node::add_output(const Tensor& output) {
  outputs_.push_back({output.shape(), output.device()});
  return static_cast<uint32_t>(outputs_.size() - 1);
}

AccumulateGrad::AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : leaf_(std::move(leaf)) {}

// Note [Gradient buffers]: the first gradient that reaches a leaf becomes its .grad (taken over without a copy
// when nothing else references it); later ones are added in place, here or, by the node that computes them, straight
// into .grad (Note [Gradients written in place] in engine.cpp), or written over a stale .grad (Note [Stale gradients]
// in tensor.h). So .grad keeps one storage across accumulations, and optimizers and gradient buckets that hold it see
// every update. The leaf's impl is read directly: Tensor::grad() would zero a stale gradient first.
std::vector<Tensor> AccumulateGrad::apply(std::vector<Tensor>&& grad_outputs) {
  Tensor incoming = std::move(grad_outputs[0]);
  Tensor leaf(leaf_);
  Tensor current(leaf_->grad);
  if (!current.defined()) {
    const bool exclusive = incoming.impl_ptr().use_count() == 1 && incoming.storage().use_count() == 1;
    leaf.set_grad(exclusive && incoming.is_contiguous() ? incoming : incoming.clone());
  } else if (leaf_->grad_stale) {
    current.copy_(incoming);
    leaf_->grad_stale = false;
  } else {
    current.add_(incoming);
  }
  run_hooks(leaf);
  return {};
}

bool AccumulateGrad::accumulate_in_place(const std::function<bool(const Tensor& grad, bool overwrite)>& write) {
  std::lock_guard<std::mutex> lock(evaluation_mutex());
  const Tensor leaf(leaf_);
  const Tensor grad(leaf_->grad);
  const OutputMeta& meta = outputs().at(0);
  if (!grad.defined() || grad.shape() != meta.shape || grad.device() != meta.device || !grad.is_contiguous())
    return false;
  if (!write(grad, leaf_->grad_stale)) return false;
  leaf_->grad_stale = false;
  run_hooks(leaf);
  return true;
}

void AccumulateGrad::run_hooks(const Tensor& leaf) const {
  for (const auto& [handle, hook] : leaf_->post_accumulate_grad_hooks) hook(leaf);
}

Edge gradient_edge(const Tensor& tensor) {
  if (!tensor.defined()) return {};
  TensorImpl* impl = tensor.impl();
  if (impl->grad_fn) return {impl->grad_fn, impl->output_nr};
  if (!impl->requires_grad) return {};
  std::lock_guard<std::mutex> lock(accumulator_mutex);
  std::shared_ptr<AccumulateGrad> accumulator = impl->grad_accumulator.lock();
  if (!accumulator) {
    accumulator = std::make_shared<AccumulateGrad>(tensor.impl_ptr());
    accumulator->add_output(tensor);
    impl->grad_accumulator = accumulator;
  }
  return {accumulator, 0};
}

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  if (!GradMode::is_enabled()) return false;
  for (const Tensor& input : inputs)
    if (input.requires_grad()) return true;
  return false;
}

void make_differentiable(const std::shared_ptr<Node>& node, const std::vector<Tensor>& inputs,
                         std::vector<Tensor>& outputs) {
  std::vector<Edge> edges;
  edges.reserve(inputs.size());
  for (const Tensor& input : inputs) edges.push_back(gradient_edge(input));
  node->set_next_edges(std::move(edges));
  for (Tensor& output : outputs) {
    if (!output.defined()) continue;
    // An integer output (indices, labels) has no gradient and keeps no history, as in PyTorch; its slot is kept so
    // that the other outputs keep their numbers (the engine gives backward zeros for it).
    if (!is_floating_point(output.dtype())) {
      node->add_output(output);
      continue;
    }
    // An output that is an input (or already belongs to a graph) gets its own handle on the same storage, so
    // that setting its history does not rewrite the input's.
    if (output.impl()->grad_fn || output.impl()->requires_grad || output.impl_ptr().use_count() > 1)
      output = raw::alias(output, output.shape(), output.strides(), output.storage_offset());
    output.impl()->output_nr = node->add_output(output);
    output.impl()->grad_fn = node;
  }
}

}  // namespace tandem::autograd
