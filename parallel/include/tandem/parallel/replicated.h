#pragma once
// The fast training path: replicas kept alive across steps, gradients in contiguous buckets, one collective per
// bucket. It gives the same parameters as the plain path (replicate every step, reduce onto the master), step for
// step within float tolerance, without cloning anything per step.
//
// A ReplicatedModule is an nn::Module, written as a DataParallel model is (the master registered as "module", so its
// parameters() are the master's and its state_dict names are "module.fc1.weight" as in PyTorch):
//
//   auto model = std::make_shared<parallel::ReplicatedModule>(net, devices);  // net's parameters on devices[0]
//   optim::SGD sgd(model->parameters(), {.lr = 0.1, .momentum = 0.9});        // a plain optimizer over the master
//   for (...) {
//     sgd.zero_grad();
//     Tensor out = (*model)(x);             // x scattered over the devices, the outputs gathered on devices[0]
//     nn::mse_loss(out, y).backward();      // when backward returns, every replica's gradients hold the sum
//     sgd.step();                           // the master's update reaches the other replicas at the next forward
//   }
//
// The per-device form is the fast path that parallel's training steps take: forward_replicas / forward_backward on
// one input per device, with replicated optimizers (replicated_optimizer.h), whose identical updates keep the
// replicas equal without copies.
//
// The gradients of every replica are views into one flat buffer per device (Note [Flat gradient buffers] in
// gradient_layout.h), installed as the parameters' .grad (PyTorch's gradient_as_bucket_view = true, always): reading
// or writing a parameter's .grad reads or writes its place in the bucket. A GradientReducer sums the buffers bucket
// by bucket. If something replaced a .grad (Module::zero_grad() with set_to_none, an optimizer's zero_grad()), the
// replaced gradient is copied back into the buffer and the view reinstalled, before the next reduction or as soon as
// backward accumulates into it.
//
// Note [Closing the step at the end of backward]: in the module form, forward opens a reduction step (in grad mode,
// outside no_sync()), and the backward that follows closes it: the first gradient that reaches the buffers queues a
// callback on the running backward pass (autograd::queue_callback), which, once the pass has produced every gradient,
// sums what is left and joins the buckets' collectives, as PyTorch's reducer does from its end-of-backward callback.
// So when backward() returns, the gradients hold the reduction, with no call in between. A forward whose backward
// never ran (an evaluation in grad mode) leaves a step without gradients, which the next forward drops; a step whose
// backward did not finish (it threw) leaves partial gradients, which the next forward discards, with an Error.
//
// Note [Unreduced gradients are refused]: an optimizer never steps on gradients that a reduction has yet to sum.
// Each replica parameter carries a gradient check (Note [Gradient checks] in tandem/core/tensor.h) that every
// optimizer's step() runs: while the buffers hold local gradients that need a reduction (a backward inside no_sync(),
// a second backward after one forward, a backward that threw), the step is an Error naming the parameter and the
// cause. With one device in one process there is nothing to reduce and nothing is refused. When the collective
// reduce-scatters (DistributedOptions::zero_stage >= 1), every such step is refused: each device holds only its shard
// of the reduction, which parallel::ShardedOptimizer reads from the buffers (check_gradients_reduced). Under
// zero_stage 2 the parameters' .grad stays undefined and no view is installed: the buffers are the devices' shards
// (Note [Staged gradient buckets] in gradient_reducer.h).

#include <cstddef>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tandem/core/device.h"
#include "tandem/core/tensor.h"
#include "tandem/nn/module.h"
#include "tandem/parallel/gradient_reducer.h"
#include "tandem/parallel/parallel_apply.h"

namespace tandem::parallel {

struct ReplicatedOptions {
  size_t bucket_size = 25 * 1024 * 1024;  // bytes per gradient bucket; each bucket is one all-reduce
  // How each bucket is summed: comm's in-process collectives by default; DistributedDataParallel passes its process
  // group's, which reduce over every replica of every process.
  GradientCollective collective = {};
};

class ReplicatedModule : public nn::Module {
 public:
  // Replica 0 is `module` itself (not copied); replica d > 0 is module->clone(devices[d]), with the master's
  // requires_grad flags. The master's current gradients are replaced by (zeroed) views of its buffer. Parameters
  // that do not require grad get no gradient view and are left alone. Do not move the replicas (Module::to) or
  // replace their parameter tensors (set_parameters) afterwards: the buffers and optimizers hold the ones seen here.
  // Every replica parameter that requires grad gets a gradient hook, removed when the ReplicatedModule is destroyed.
  // Do not replace the buffer tensors either (Module::set_buffers); load() and in-place writes are fine.
  // The replicas run in the master's training modes: every forward first copies the master's flags
  // (train(), eval(), per submodule) onto the other replicas when any flag changed (Note [Following the master's
  // modes] in nn/module.h). Buffers, as in PyTorch's DataParallel: the master's (replica 0's) are the ones that
  // count; every forward first copies them onto the other replicas (device-to-device copies, none when
  // the module has no buffers), so every replica normalizes with the master's running statistics, and what the other
  // replicas write into their copies (BatchNorm's updates from their shares of the batch) is overwritten at the next
  // step. Between processes, DistributedDataParallel broadcasts rank 0's (DistributedOptions::broadcast_buffers).
  // Every replica parameter with a gradient view also gets a gradient check (Note [Unreduced gradients are refused]):
  // a parameter checked by another ReplicatedModule still alive is an Error.
  // Errors: null module; empty `devices`; a device listed twice or not existing; the module's parameters not all
  // on devices[0]; a module without parameters or not clonable; bucket_size 0; a collective function missing.
  ReplicatedModule(std::shared_ptr<nn::Module> module, std::vector<Device> devices, ReplicatedOptions options = {});
  ~ReplicatedModule() override;  // removes the gradient checks and hooks from the replicas' parameters
  ReplicatedModule(const ReplicatedModule&) = delete;
  ReplicatedModule& operator=(const ReplicatedModule&) = delete;

  const std::vector<Device>& devices() const { return devices_; }
  size_t size() const { return replicas_.size(); }
  const std::shared_ptr<nn::Module>& module() const { return replicas_.front(); }  // the master, replica 0
  // Every replica, in the master's current training modes (train() / eval() on the master or on this module are
  // seen here at once, Note [Following the master's modes] in nn/module.h).
  const std::vector<std::shared_ptr<nn::Module>>& replicas() const;

  // ---- the module form (Note [Closing the step at the end of backward]) ----
  // forward_all: every input is scattered along dim 0 over the devices (parallel::scatter: a batch of fewer rows
  // than devices uses fewer replicas, the others take part in the reduction with zero gradients), replica i runs on
  // its chunks, and every output is gathered along dim 0 on devices[0] (parallel::gather), differentiably, as
  // DataParallel does. With one device, or inputs without rows, the master runs alone on the inputs moved to
  // devices[0]. Before running, the other replicas take the master's parameter values (so a plain optimizer over
  // parameters(), which updates the master, reaches them), buffers and training modes. In grad mode it opens the
  // step that the next backward closes; inside no_sync() that backward accumulates locally instead. Errors: no
  // inputs; those of scatter, of the replicas' forward and of gather; a step still open whose backward did not
  // finish (the partial gradients are discarded, as by zero_grad(), before the Error); a step opened by
  // prepare_for_backward() still open.
  Tensor forward(const Tensor& input) override;
  std::vector<Tensor> forward_all(const std::vector<Tensor>& inputs) override;
  std::string name() const override { return "ReplicatedModule"; }
  // Whether a parameter that gets no gradient in a backward of the module form is allowed: true (the default in one
  // process) reduces it with zeros; false makes that backward an Error naming the parameters
  // (DistributedDataParallel's default, as PyTorch's).
  bool find_unused_parameters() const { return find_unused_parameters_; }
  void set_find_unused_parameters(bool allowed) { find_unused_parameters_ = allowed; }

  // While the returned guard lives, a backward of the module form accumulates gradients locally without any
  // collective (gradient accumulation, PyTorch's no_sync()); the first synced backward after it reduces everything
  // accumulated. An optimizer step before that is refused (Note [Unreduced gradients are refused]). The per-device
  // form takes `reduce` explicitly (DistributedDataParallel passes its no_sync() state there).
  class NoSync {
   public:
    explicit NoSync(ReplicatedModule& model);
    ~NoSync();
    NoSync(const NoSync&) = delete;
    NoSync& operator=(const NoSync&) = delete;

   private:
    ReplicatedModule& model_;
    bool previous_;
  };
  NoSync no_sync() { return NoSync(*this); }
  bool syncing() const { return syncing_; }

  // ---- the per-device form ----
  // Runs replica i on inputs[i] (on devices[i]) with parallel_apply. Fewer inputs than devices (a batch with fewer
  // rows than devices) runs the first inputs.size() replicas; the others contribute zero gradients.
  // Errors: no inputs or more inputs than devices; input i not on devices[i]; a replica's exception (as
  // parallel_apply).
  std::vector<Tensor> forward_replicas(const std::vector<Tensor>& inputs);

  // Forward, loss and backward of every replica, each on its device's worker thread and all at once, and the sum of
  // the replicas' gradients: afterwards every replica's .grad holds the sum over replicas, as after
  // reduce_gradients(), which then has nothing left to do. The replicas' graphs are independent (each replica's
  // parameters are its own leaves), so each backward runs beside the others, and each bucket is summed while
  // backward goes on (Note [Overlapped gradient reduction] in gradient_reducer.h). loss(i, output) returns replica
  // i's loss, a one-element tensor on devices[i]; for the gradient of a mean loss over the whole batch, weight it by
  // the replica's share of the rows; it must not run backward itself. Returns the losses (detached). Gradients
  // accumulate across calls without zero_grad() as on one device: when the buffers already hold sums, those count
  // once (Note [Accumulating onto sums] in gradient_reducer.cpp). Same input rules and errors as forward_replicas();
  // also an error: a parameter that receives two gradients in one call (found after the second one is accumulated:
  // zero_grad() before going on); a step still open (prepare_for_backward()).
  // With `reduce` false nothing is summed (gradient accumulation): each replica's gradients accumulate in its own
  // buffer, and a later reduction sums everything accumulated; sums already held count once there too.
  // `threads` chooses where the replicas run (parallel_apply.h): on their workers, all at once, or one after another
  // on the calling thread (what the capture of a CUDA graph needs: parallel::TrainingStep).
  // `seeds`, when not empty, holds one one-element tensor per input: replica i's backward starts from seeds[i] in
  // place of a one (Tensor::backward's gradient), so that the gradients are those of seeds[i] * loss_i without the
  // product being taken (Note [Weighting by the seed] in parallel/src/replica_losses.h). Errors: also seeds of another
  // count. `bucket_started`, when set, is the reducer's callback for each bucket whose sum starts while backward goes
  // on (GradientReducer::begin: parallel::StepsInBackward updates the bucket's parameters there). Errors: also a
  // callback with `reduce` false.
  std::vector<Tensor> forward_backward(const std::vector<Tensor>& inputs,
                                       const std::function<Tensor(size_t replica, const Tensor& output)>& loss,
                                       bool reduce = true, ReplicaThreads threads = ReplicaThreads::Workers,
                                       const std::vector<Tensor>& seeds = {},
                                       const GradientReducer::BucketStarted& bucket_started = {});

  // Prepares the buffers for a backward that the caller runs over the outputs of forward_replicas() (loss.backward()).
  // With `reduce` it opens a step: each bucket is summed as soon as it is final on every replica, while backward goes
  // on (Note [Overlapped gradient reduction] in gradient_reducer.h), and reduce_gradients() closes it. Replicas
  // 0..active-1 run backward (active: the number of inputs forward_replicas() got, 0 when this process has no rows),
  // the others take part with the gradients they hold. Order: forward_replicas(), prepare_for_backward(), one backward
  // over the replicas' losses (at most one gradient per parameter and replica), reduce_gradients(); a step left open
  // (no reduce_gradients() after the backward, or an exception in it) must be closed by reduce_gradients() before
  // the next prepare_for_backward(), forward_backward() or zero_grad(), which refuse to run otherwise. With `reduce`
  // false no step is opened: the backward's gradients stay in each replica's buffer until a later reduction
  // (gradient accumulation). Either way, gradients already summed count once in the next sum (Note [Accumulating
  // onto sums] in gradient_reducer.cpp). Errors: a step open; active > size().
  void prepare_for_backward(size_t active, bool reduce = true);
  bool step_open() const { return reducer_->step_open(); }
  // Closes an open step without summing (after an exception in its backward): joins the collectives it started; the
  // buffers hold partial gradients until zero_grad(). Does nothing without an open step.
  void abandon_step() {
    reducer_->abandon();
    module_step_ = false;
  }

  // Sums the replicas' gradients: afterwards every replica's .grad holds the sum over replicas (one all_reduce per
  // bucket). Closes the step that prepare_for_backward() opened (summing the buckets that are left and joining the
  // collectives started during backward). Does nothing when they are sums already (after forward_backward, or after
  // reduce_gradients() with no backward since).
  void reduce_gradients();
  // Zeroes every gradient (and reinstalls the gradient views where something replaced them), without a pass over
  // the buffers: the views are marked stale and the next backward writes over them (Note [Zeroing by marking] in
  // replicated.cpp); reading a gradient (.grad, gradient_buffer()) or reducing gives zeros where none was written.
  // A step that the module form's forward opened is dropped. Errors: a step open (prepare_for_backward()).
  // (nn::Module::zero_grad(set_to_none), reached through a Module
  // reference, clears the master's gradients only; the views come back as the class comment says.)
  void zero_grad();
  // Copies the master's parameter values into every other replica (after changing the master outside of the
  // replicated optimizer, e.g. loading a checkpoint into module()).
  void sync_parameters();
  // Copies the master's buffer values into every other replica (forward and forward_backward do it themselves).
  void sync_buffers();

  size_t bucket_count() const { return reducer_->layout().buckets().size(); }
  // Where each parameter's gradient lies in the flat buffers, and the buckets (the same for every replica).
  const GradientLayout& gradient_layout() const { return reducer_->layout(); }
  // Whether the gradients are reduced across processes (the module of a DistributedDataParallel).
  bool spans_processes() const { return reducer_->collective().spans_processes; }
  // Whether work issued on a device's communication stream right after a bucket's sum has started runs after that
  // sum (Note [Optimizer steps in backward] in steps_in_backward.h): with the in-process collective on CUDA devices,
  // which sums there (comm::all_reduce_async), and on CPU devices, where a sum is done when it returns; not across
  // processes (a process group sums on streams of its own), nor on a mix of CPU and CUDA devices.
  bool sums_on_comm_streams() const;
  // Replica d's flat gradient buffer (1-D, every parameter's gradient in parameters() order), its stale views zeroed
  // first (Note [Zeroing by marking] in replicated.cpp); with staged buckets (DistributedOptions::zero_stage 2), its
  // shard of the reduced gradients (Note [Staged gradient buckets] in gradient_reducer.h).
  const Tensor& gradient_buffer(size_t replica) const;
  const GradientReducer& gradient_reducer() const { return *reducer_; }
  // The check that every optimizer's step runs on the replicas' parameters (Note [Unreduced gradients are refused]),
  // for an optimizer that reads the gradient buffers instead (parallel::ShardedOptimizer): an Error naming `user`
  // and the cause while the buffers hold gradients that need a reduction.
  void check_gradients_reduced(const std::string& user) const;

 private:
  // Why the buffers hold gradients that need a reduction (Note [Unreduced gradients are refused]).
  enum class UnreducedCause { BackwardWithoutForward, NoSync, StepNotFinished };

  bool install_gradient_views(bool zero);
  void keep_gradient_view(size_t replica, size_t parameter);
  void zero_stale_gradients(size_t replica) const;
  void check_inputs(const std::vector<Tensor>& inputs, const char* caller) const;
  void check_no_step_open(const char* caller) const;
  void prepare_buffers(size_t active, bool reduce, const GradientReducer::BucketStarted& bucket_started = {},
                       GradientReducer::FirstGradient first_gradient = {});
  void follow_master_modes() const;
  void drop_unfinished_step();
  void close_step_after_backward();
  void check_reduced(const std::string& user, size_t parameter) const;
  void check_unreduced(const std::string& user, size_t parameter) const;
  std::vector<std::vector<Tensor>> run_module_form(const std::vector<std::vector<Tensor>>& chunks);

  std::vector<Device> devices_;
  std::vector<std::shared_ptr<nn::Module>> replicas_;
  std::vector<std::vector<Tensor>> parameters_;       // [replica][parameter]
  std::vector<std::vector<Tensor>> buffers_;          // [replica][buffer]
  std::vector<std::vector<Tensor>> gradient_views_;   // [replica][parameter]: views into the replica's flat buffer
  std::unique_ptr<GradientReducer> reducer_;          // owns the flat buffers and the hooks (built after them)
  std::vector<std::vector<uint64_t>> view_hooks_;     // [replica]: keep_gradient_view's hook handles
  mutable uint64_t modes_generation_ = ~uint64_t{0};  // nn::Module::training_mode_generation() at the last copy
  bool syncing_ = true;                               // no NoSync guard alive
  bool module_step_ = false;                          // the open step was opened by the module form
  bool find_unused_parameters_ = true;
  UnreducedCause unreduced_cause_ = UnreducedCause::BackwardWithoutForward;
};

}  // namespace tandem::parallel
