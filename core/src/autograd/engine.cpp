// The backward pass: a dependency-counted walk over the graph reachable from the roots.
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
  current = current.defined() ? raw::binary(backend::BinaryOp::Add, current, grad, "backward") : std::move(grad);
}

struct LaterFirst {
  bool operator()(const Node* a, const Node* b) const { return a->sequence_nr() < b->sequence_nr(); }
};

}  // namespace

void run_backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots) {
  TANDEM_CHECK(roots.size() == grad_roots.size(), "backward: got ", grad_roots.size(), " gradients for ", roots.size(),
               " roots");
  NoGradGuard no_grad;  // backward itself is not recorded

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
    accumulate(buffer, edge.input_nr, grad_roots[i], *node);
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

    std::vector<Tensor> input_grads = node->apply(std::move(grads));
    node->release();
    const auto& edges = node->next_edges();
    TANDEM_CHECK(input_grads.size() == edges.size() || edges.empty(), "backward: ", node->name(), " returned ",
                 input_grads.size(), " gradients for ", edges.size(), " inputs");
    for (size_t i = 0; i < edges.size(); ++i) {
      const Edge& edge = edges[i];
      if (!edge.valid()) continue;
      Node* next = edge.node.get();
      keep_alive.emplace(next, edge.node);
      auto& buffer = buffers[next];
      buffer.resize(next->outputs().size());
      accumulate(buffer, edge.input_nr, std::move(input_grads[i]), *next);
      if (--dependencies[next] == 0) ready.push(next);
    }
  }
}

void backward(const std::vector<Tensor>& roots) {
  std::vector<Tensor> seeds;
  for (size_t i = 0; i < roots.size(); ++i) {
    TANDEM_CHECK(roots[i].defined() && roots[i].numel() == 1, "autograd::backward: root ", i,
                 " must be a one-element tensor",
                 roots[i].defined() ? ", got shape " + to_string(roots[i].shape()) : "");
    seeds.push_back(Tensor::ones(roots[i].shape(), roots[i].device()));
  }
  run_backward(roots, seeds);
}

}  // namespace tandem::autograd
