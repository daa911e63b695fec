// The backward pass: a dependency-counted walk over the graph reachable from the roots.
#include "engine.h"

#include <queue>
#include <unordered_map>

#include "raw_ops.h"
#include "tandem/core/autograd.h"
#include "tandem/core/error.h"

namespace tandem::autograd {

namespace {

// Counts, for every node reachable from the roots, how many edges point at it.
std::unordered_map<Node*, int> count_dependencies(const std::vector<Node*>& roots) {
  std::unordered_map<Node*, int> dependencies;
  std::vector<Node*> stack = roots;
  std::unordered_map<Node*, bool> seen;
  for (Node* root : roots) seen[root] = true;
  while (!stack.empty()) {
    Node* node = stack.back();
    stack.pop_back();
    for (const Edge& edge : node->next_edges()) {
      if (!edge.valid()) continue;
      Node* next = edge.node.get();
      ++dependencies[next];
      if (!seen[next]) {
        seen[next] = true;
        stack.push_back(next);
      }
    }
  }
  return dependencies;
}

// Adds `grad` into slot `slot` of `buffer` (gradients that meet are summed).
void accumulate(std::vector<Tensor>& buffer, uint32_t slot, Tensor grad, const Node& node) {
  if (!grad.defined()) return;
  const OutputMeta& meta = node.outputs().at(slot);
  TANDEM_CHECK(grad.shape() == meta.shape, "backward: ", node.name(), " received a gradient of shape ",
               to_string(grad.shape()), " for an output of shape ", to_string(meta.shape));
  TANDEM_CHECK(grad.device() == meta.device, "backward: ", node.name(), " received a gradient on ", grad.device(),
               " for an output on ", meta.device);
  Tensor& current = buffer[slot];
  current =
      current.defined() ? raw::pointwise({backend::Pointwise::Add}, {current, grad}, "backward") : std::move(grad);
}

// The callbacks queued by the backward pass running on this thread (queue_callback); null outside one.
thread_local std::vector<std::function<void()>>* queued_callbacks = nullptr;

// Makes `callbacks` the running pass's queue for its lifetime, restoring the outer pass's (a backward run by a hook).
class CallbackScope {
 public:
  explicit CallbackScope(std::vector<std::function<void()>>& callbacks) : outer_(queued_callbacks) {
    queued_callbacks = &callbacks;
  }
  ~CallbackScope() { queued_callbacks = outer_; }
  CallbackScope(const CallbackScope&) = delete;
  CallbackScope& operator=(const CallbackScope&) = delete;

 private:
  std::vector<std::function<void()>>* outer_;
};

struct LaterFirst {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr() < b->sequence_nr(); }
};

// Note [Gradients written in place]: a leaf's gradient normally travels as a tensor to the leaf's AccumulateGrad,
// which adds it into .grad (Note [Gradient buffers] in node.cpp). When .grad already exists (a view into a flat
// gradient buffer, or what earlier backward passes left there), the node that produces the gradient can add it
// straight into .grad instead, through Function::write_leaf_gradient: say, as a matrix product that accumulates
// onto its output (beta = 1), which saves materializing the gradient and the pass that adds it. Before a node runs,
// the engine allows this for each input whose edge leads to a leaf's accumulator (the leaf itself, not a view of it)
// that nothing else will feed in this pass: its dependency count is 1 (this edge) and no gradient for it waits in
// the buffers. A leaf used twice (twice by one node, by two nodes, or also as a root of the pass) is left to its
// accumulator, which sums its gradients as before. At the write, AccumulateGrad::accumulate_in_place checks, under
// the accumulator's lock, that .grad is defined and a contiguous tensor of the leaf's gradient shape and device;
// otherwise nothing is written and the node returns its gradient, which the accumulator takes over or adds as before.
// A stale .grad (Note [Stale gradients] in tensor.h) is written over instead of added to (beta = 0), exactly as the
// accumulator copies a gradient over it; either way the mark is cleared.
// The write holds the accumulator's lock like an accumulation, so backward passes on several threads that share the
// leaf write and accumulate into it one at a time (on CUDA, all of them are also ordered on the device's compute
// stream). Right after the write, still under the lock and on the pass's thread, the leaf's post-accumulate-grad
// hooks run once, as after an accumulation: the gradient reducer's readiness hooks see the gradient final in its
// bucket, as before. The node returns an undefined gradient for that input, and the engine retires the accumulator
// for this pass without running it. Nothing else changes: with retain_graph a later pass writes onto what this one
// left, as accumulation does; backward runs without grad mode and has no create_graph, so .grad never carries a
// graph; the value in .grad is the same sum (bit for bit on the CPU, where the product is added after it is
// computed; on CUDA up to float rounding).
std::vector<AccumulateGrad*> writable_leaves(const Node& node, const std::unordered_map<Node*, int>& dependencies,
                                             const std::unordered_map<Node*, std::vector<Tensor>>& buffers) {
  const std::vector<Edge>& edges = node.next_edges();
  std::vector<AccumulateGrad*> accumulators(edges.size(), nullptr);
  for (size_t i = 0; i < edges.size(); ++i) {
    auto* accumulator = dynamic_cast<AccumulateGrad*>(edges[i].node.get());
    if (accumulator == nullptr || dependencies.at(accumulator) != 1) continue;
    const auto waiting = buffers.find(accumulator);
    if (waiting != buffers.end() && waiting->second.at(0).defined()) continue;
    accumulators[i] = accumulator;
  }
  return accumulators;
}

}  // namespace

namespace detail {

bool LeafWrites::write(size_t input, const std::function<bool(const Tensor& grad, bool overwrite)>& write) {
  AccumulateGrad* accumulator = accumulators_[input];
  if (accumulator == nullptr || !accumulator->accumulate_in_place(write)) return false;
  written_[input] = 1;
  return true;
}

Tensor seed_gradient(const Tensor& root, const Tensor& gradient, const char* caller, const std::string& subject) {
  TANDEM_CHECK(root.defined(), caller, ": ", subject, " is undefined");
  TANDEM_CHECK(root.requires_grad(), caller, ": ", subject, " does not require grad and has no grad_fn");
  if (!gradient.defined()) {
    TANDEM_CHECK(root.numel() == 1, caller,
                 ": a gradient can be created implicitly only for one-element tensors, "
                 "but ",
                 subject, " has shape ", to_string(root.shape()), "; pass a gradient");
    return Tensor::ones(root.shape(), root.device());
  }
  TANDEM_CHECK(gradient.shape() == root.shape(), caller, ": the gradient for ", subject, " has shape ",
               to_string(gradient.shape()), " but expected ", to_string(root.shape()));
  return gradient.device() == root.device() ? gradient : raw::to_device(gradient, root.device());
}

void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& seeds, bool retain_graph) {
  TANDEM_CHECK(roots.size() == seeds.size(), "backward: got ", seeds.size(), " gradients for ", roots.size(), " roots");
  NoGradGuard no_grad;  // backward itself is not recorded
  std::vector<std::function<void()>> callbacks;
  CallbackScope callback_scope(callbacks);

  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  std::unordered_map<Node*, std::shared_ptr<Node>> keep_alive;
  std::vector<Node*> root_nodes;
  for (size_t i = 0; i < roots.size(); ++i) {
    const Edge edge = gradient_edge(roots[i]);
    TANDEM_CHECK(edge.valid(), "backward: root ", i, " does not require grad and has no grad_fn");
    Node* node = edge.node.get();
    keep_alive[node] = edge.node;
    auto& buffer = buffers[node];
    buffer.resize(node->outputs().size());
    accumulate(buffer, edge.input_nr, seeds[i], *node);
    root_nodes.push_back(node);
  }

  std::unordered_map<Node*, int> dependencies = count_dependencies(root_nodes);
  std::priority_queue<Node*, std::vector<Node*>, LaterFirst> ready;
  for (Node* root : root_nodes)
    if (dependencies[root] == 0) ready.push(root);

  while (!ready.empty()) {
    Node* node = ready.top();
    ready.pop();
    std::shared_ptr<Node> owner = keep_alive[node];
    std::vector<Tensor> grads = std::move(buffers[node]);
    buffers.erase(node);
    keep_alive.erase(node);
    grads.resize(node->outputs().size());
    for (size_t i = 0; i < grads.size(); ++i)
      if (!grads[i].defined()) grads[i] = Tensor::zeros(node->outputs()[i].shape, node->outputs()[i].device);

    LeafWrites leaf_writes(writable_leaves(*node, dependencies, buffers));
    std::vector<Tensor> input_grads = node->evaluate(std::move(grads), retain_graph, leaf_writes);
    const auto& edges = node->next_edges();
    TANDEM_CHECK(input_grads.size() == edges.size() || edges.empty(), "backward: ", node->name(), " returned ",
                 input_grads.size(), " gradients for ", edges.size(), " inputs");
    for (size_t i = 0; i < edges.size(); ++i) {
      const Edge& edge = edges[i];
      if (!edge.valid()) continue;
      Node* next = edge.node.get();
      if (leaf_writes.written(i)) {  // the leaf has its gradient and its hooks ran: its accumulator is done
        --dependencies[next];
        continue;
      }
      keep_alive.emplace(next, edge.node);
      auto& buffer = buffers[next];
      buffer.resize(next->outputs().size());
      accumulate(buffer, edge.input_nr, std::move(input_grads[i]), *next);
      if (--dependencies[next] == 0) ready.push(next);
    }
  }
  // Indexed: a callback may queue more, which grows the vector.
  for (size_t i = 0; i < callbacks.size(); ++i) {
    std::function<void()> callback = std::move(callbacks[i]);
    callback();
  }
}

}  // namespace detail

void queue_callback(std::function<void()> callback) {
  TANDEM_CHECK(queued_callbacks != nullptr,
               "autograd::queue_callback: no backward pass is running on this thread; call it from a hook or a "
               "node's backward");
  TANDEM_CHECK(callback != nullptr, "autograd::queue_callback: the callback is empty");
  queued_callbacks->push_back(std::move(callback));
}

bool backward_running() { return queued_callbacks != nullptr; }

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots, bool retain_graph) {
  constexpr const char* fn = "autograd::backward";
  TANDEM_CHECK(grad_roots.empty() || grad_roots.size() == roots.size(), fn, ": got ", grad_roots.size(),
               " gradients for ", roots.size(), " roots (expected none or one per root)");
  std::vector<Tensor> seeds;
  seeds.reserve(roots.size());
  for (size_t i = 0; i < roots.size(); ++i)
    seeds.push_back(detail::seed_gradient(roots[i], grad_roots.empty() ? Tensor() : grad_roots[i], fn,
                                          "root " + std::to_string(i)));
  detail::run_backward(roots, seeds, retain_graph);
}

}  // namespace tandem::autograd
