#pragma once
// Define-by-run autograd. Each non-leaf result holds a Node (its grad_fn) with one Edge per differentiable input,
// pointing at the input's grad_fn or, for a leaf that requires grad, at the leaf's AccumulateGrad node.
// backward() walks the graph in dependency order, summing gradients that meet; the graph may span several devices.

#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tandem/core/grad_mode.h"
#include "tandem/core/tensor.h"

namespace tandem::autograd {

namespace detail {
class LeafWrites;  // the engine's permission to write gradients into leaves (core/src/autograd/engine.h)
}  // namespace detail

struct Edge {
  std::shared_ptr<Node> node;  // null: the input does not need a gradient
  uint32_t input_nr = 0;       // which of node's outputs this edge feeds
  bool valid() const { return node != nullptr; }
};

// What backward needs to know of each output to materialize a zero gradient for it.
struct OutputMeta {
  Shape shape;
  Device device;
};

class Node : public std::enable_shared_from_this<Node> {
 public:
  Node();
  virtual ~Node() = default;
  Node(const Node&) = delete;
  Node& operator=(const Node&) = delete;

  // grad_outputs[i] is the gradient of output i (always defined: zeros are filled in for outputs that got none).
  // Returns one gradient per next edge (undefined where that input gets none), on that input's device.
  virtual std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) = 0;
  virtual std::string name() const = 0;
  // Frees the tensors this node saved for its backward; called after each run of a backward that does not retain
  // the graph (Note [Saved tensors] in core/src/autograd/function.cpp). A node that saved none can run again.
  virtual void release_saved_tensors() {}

  // apply, then (unless retain_graph) release_saved_tensors, under this node's lock: backward passes on several
  // threads may share a node (a replicate's Broadcast, a leaf's AccumulateGrad), and they run it one at a time.
  // The node may write the gradients of the inputs that leaf_writes names straight into their leaves' .grad instead
  // of returning them (apply_writing_leaves; Note [Gradients written in place] in core/src/autograd/engine.cpp).
  std::vector<Tensor> evaluate(std::vector<Tensor>&& grad_outputs, bool retain_graph, detail::LeafWrites& leaf_writes);

  const std::vector<Edge>& next_edges() const { return next_edges_; }
  const std::vector<OutputMeta>& outputs() const { return outputs_; }
  uint64_t sequence_nr() const { return sequence_nr_; }

  // Used when wiring a node into the graph (see make_differentiable below).
  void set_next_edges(std::vector<Edge> edges) { next_edges_ = std::move(edges); }
  uint32_t add_output(const Tensor& output);

 protected:
  // apply, for an evaluation allowed to write some inputs' gradients into their leaves (Note [Gradients written in
  // place]). The default writes none: it is apply.
  virtual std::vector<Tensor> apply_writing_leaves(std::vector<Tensor>&& grad_outputs, detail::LeafWrites&) {
    return apply(std::move(grad_outputs));
  }
  std::mutex& evaluation_mutex() { return mutex_; }

 private:
  std::vector<Edge> next_edges_;
  std::vector<OutputMeta> outputs_;
  uint64_t sequence_nr_;  // creation order: later nodes run first among those that are ready
  std::mutex mutex_;      // held by evaluate
};

// Accumulates the incoming gradient into a leaf's .grad (added in place when one exists, so that storage stays
// stable across steps; see Note [Gradient buffers] in core/src/autograd/node.cpp).
class AccumulateGrad final : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf);
  std::vector<Tensor> apply(std::vector<Tensor>&& grad_outputs) override;
  std::string name() const override { return "AccumulateGrad"; }
  const std::shared_ptr<TensorImpl>& leaf() const { return leaf_; }

  // Under this node's lock: when the leaf's .grad is a contiguous tensor of this node's output shape and device,
  // calls write(.grad, overwrite), which adds a gradient into it (or, with overwrite, writes it over .grad's stale
  // values: Note [Stale gradients] in tensor.h) and returns true, or returns false having written nothing; after a
  // write, clears the stale mark and runs the post-accumulate-grad hooks, as an accumulation does. Returns whether
  // write wrote. Only the engine's LeafWrites call it (Note [Gradients written in place] in
  // core/src/autograd/engine.cpp).
  bool accumulate_in_place(const std::function<bool(const Tensor& grad, bool overwrite)>& write);

 private:
  void run_hooks(const Tensor& leaf) const;

  std::shared_ptr<TensorImpl> leaf_;
};

// The edge through which a gradient for `tensor` flows: its grad_fn, its leaf accumulator, or none.
Edge gradient_edge(const Tensor& tensor);
// Whether any of `inputs` needs a gradient and grad mode is on.
bool any_requires_grad(const std::vector<Tensor>& inputs);
// Connects `node` to `inputs` (one edge each) and makes it the grad_fn of each output (in order).
void make_differentiable(const std::shared_ptr<Node>& node, const std::vector<Tensor>& inputs,
                         std::vector<Tensor>& outputs);

// Clears the gradients of `tensors`: with set_to_none (PyTorch's default) every .grad becomes undefined, so the next
// backward hands over fresh ones; otherwise existing gradients are zeroed in place (their storage is kept).
void zero_grad(const std::vector<Tensor>& tensors, bool set_to_none = true);

// One backward pass over several roots at once (torch.autograd.backward). grad_roots is empty or has one entry per
// root: the gradient of that root (its shape; moved to the root's device), or undefined to seed a one-element root
// with 1. Gradients accumulate into the leaves' .grad. Nodes shared by the roots (such as a replicate's Broadcast)
// run once, with the gradients of all of them. Each node that runs frees its saved tensors unless retain_graph;
// running it again is then an error (Note [Saved tensors] in core/src/autograd/function.cpp).
// Errors: grad_roots of another length; an undefined root; a root that does not require grad; an undefined
// gradient for a root of more than one element; a gradient of another shape than its root; a node whose saved
// tensors an earlier backward freed.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grad_roots = {}, bool retain_graph = false);

// Runs `callback` on this thread once the backward pass running on it has walked its whole graph, just before that
// backward call returns (PyTorch's queue_callback on the execution engine): for work that must follow every gradient
// of the pass, such as parallel::ReplicatedModule closing its gradient reduction. Callbacks run in the order they were
// queued, and a callback may queue more, which run after it. An exception a callback throws propagates out of the
// backward call, and the callbacks after it do not run; none runs when the walk itself throws. Call it from inside a
// backward pass (a hook or a node's backward). Errors: no backward pass running on this thread.
void queue_callback(std::function<void()> callback);
// Whether a backward pass is running on this thread (queue_callback may be called).
bool backward_running();

// ---- custom differentiable operations -------------------------------------------------------------------------
// Subclass Function, implement forward (runs with grad mode off) and backward, and call apply:
//
//   struct Square : autograd::Function {
//     std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
//       save_for_backward({in[0]});
//       return {in[0] * in[0]};
//     }
//     std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
//       return {g[0] * saved_tensors()[0] * 2.0f};
//     }
//   };
//   Tensor y = autograd::apply(std::make_shared<Square>(), {x})[0];
//
// backward returns one gradient per input (undefined for inputs that get none). Tensors that backward needs (inputs
// or outputs of forward) go through save_for_backward; metadata (shapes, devices, constants) may live in plain
// members. See Note [Saved tensors] in core/src/autograd/function.cpp.
class FunctionNode;  // the graph node that runs a Function's backward (function.cpp)

class Function {
 public:
  virtual ~Function() = default;
  virtual std::vector<Tensor> forward(const std::vector<Tensor>& inputs) = 0;
  virtual std::vector<Tensor> backward(const std::vector<Tensor>& grad_outputs) = 0;
  virtual std::string name() const { return "Function"; }

  // Whether input i gets a gradient (valid in forward and backward); backward may skip the others and return an
  // undefined tensor for them, e.g. the gradient of a network's input batch.
  bool needs_input_grad(size_t i) const { return i < needs_input_grad_.size() && needs_input_grad_[i]; }

 protected:
  // For backward: lets `write` add this Function's gradient for input `input` straight into the .grad of that input
  // (a leaf), instead of returning it, when the engine allows it (Note [Gradients written in place] in
  // core/src/autograd/engine.cpp: the input is a leaf used by this node alone in this backward pass, and its .grad
  // is a contiguous tensor of the input's shape and device). write(grad, overwrite) adds the gradient into grad, or
  // with overwrite (grad is stale: Note [Stale gradients] in tensor.h) writes it over grad's values, and returns
  // true; or returns false having written nothing (say, because grad shares memory with an operand). Returns true
  // when write wrote: the leaf's post-accumulate-grad hooks have then run, and backward must return an undefined
  // tensor for `input`. Returns false otherwise, without calling write or after it declined: backward returns the
  // gradient as usual. Errors: no such input; a second write of one input in one backward call.
  // Requires: every read of that leaf's values by this backward call is issued before the write. Once its hooks have
  // run, the leaf may be updated on another stream while backward goes on (parallel's optimizer steps in backward:
  // Note [Optimizer steps in backward] in parallel/src/steps_in_backward.h); so compute, say, the input's gradient
  // from the weight first, then write the weight's gradient, as the linear layer does.
  bool write_leaf_gradient(size_t input, const std::function<bool(const Tensor& grad, bool overwrite)>& write);

  // Keeps `tensors` for backward (call it from forward; a later call replaces them). A backward that does not
  // retain the graph frees them after running this Function's backward, and any later run of it is an error.
  void save_for_backward(std::vector<Tensor> tensors);
  // The tensors given to save_for_backward, in order. Errors: an earlier backward freed them.
  const std::vector<Tensor>& saved_tensors() const;

 private:
  friend class FunctionNode;
  friend std::vector<Tensor> apply(const std::shared_ptr<Function>& function, const std::vector<Tensor>& inputs);
  // Throws "<caller>: <name>'s saved tensors were freed by an earlier backward; ..." when they were.
  void check_saved_tensors(const char* caller) const;
  void release_saved_tensors();

  std::vector<bool> needs_input_grad_;
  std::vector<Tensor> saved_;
  bool saved_tensors_freed_ = false;           // set by a release that freed at least one defined tensor
  detail::LeafWrites* leaf_writes_ = nullptr;  // set while backward runs (FunctionNode::apply_writing_leaves)
};

std::vector<Tensor> apply(const std::shared_ptr<Function>& function, const std::vector<Tensor>& inputs);
// apply for a Function with one output: that output.
Tensor apply_one(const std::shared_ptr<Function>& function, const std::vector<Tensor>& inputs);

}  // namespace tandem::autograd
