#pragma once
// The fast training path: replicas kept alive across steps, gradients in contiguous buckets, one collective per
// bucket. It gives the same parameters as the plain path (replicate every step, reduce onto the master), step for
// step within float tolerance, without cloning anything per step.
//
//   parallel::ReplicatedModule model(net, devices);            // net's parameters on devices[0]
//   parallel::ReplicatedSGD sgd(model, {.lr = 0.1, .momentum = 0.9});
//   for (...) {
//     model.zero_grad();
//     std::vector<Tensor> outputs = model.forward(parallel::scatter(x, devices));
//     Tensor loss = nn::mse_loss(parallel::gather(outputs, devices[0]), y);   // or per-replica losses
//     loss.backward();
//     model.reduce_gradients();   // every replica's gradient becomes the sum over replicas
//     sgd.step();                 // identical updates keep the replicas equal, no broadcast needed
//   }
//
// Note [Flat gradient buffers]: each replica's parameter gradients are views into one contiguous buffer per device,
// laid out in parameters() order, installed as the parameters' .grad before backward. Backward accumulates into an
// existing .grad in place (Note [Gradient buffers] in core), so after backward each buffer holds that replica's
// gradients, and an all_reduce over narrow views of the buffers (one per bucket of about `bucket_size` bytes) sums
// them on every device at once. Buckets are formed from the last parameter backwards, the order in which backward
// produces the gradients. If something replaced a .grad (Module::zero_grad() with set_to_none, a fresh optimizer),
// reduce_gradients() copies it back into the buffer and reinstalls the view.
//
// Note [Overlapped gradient reduction]: forward_backward sums each bucket while backward still runs on the layers
// before it, like llm.c and DistributedDataParallel. Every replica parameter that requires grad carries a
// post-accumulate-grad hook (installed once, removed by the destructor). During forward_backward, when a replica's
// backward has accumulated the last gradient of a bucket on its device, the hook records a StreamMarker there; the
// thread that completes a bucket on the last replica starts comm::all_reduce_async on the bucket's slices with
// those markers, so each device's communication stream runs the all-reduce as soon as its part is final, beside the
// rest of backward on the compute stream. Replicas without an input this step take part with the gradients they
// hold (markers recorded at the start). Once every replica has finished, buckets that were never completed
// (parameters that got no gradient) are summed with comm::all_reduce, and every bucket's work is joined into the
// compute streams: device-side waits only, no host synchronization in the step. The hooks run on several worker
// threads at once; the per-step counters are atomic where threads share them, and comm launches one collective
// at a time. The buckets may start in a different order from one step to the next, but each is one collective
// over all devices, so every rank sees the same sequence. Outside forward_backward the hooks only note that the
// buffers hold fresh local gradients, so that reduce_gradients() sums them.

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tandem/core/device.h"
#include "tandem/core/tensor.h"
#include "tandem/nn/module.h"
#include "tandem/optim/sgd.h"

namespace tandem::parallel {

struct ReplicatedOptions {
  size_t bucket_size = 25 * 1024 * 1024;  // bytes per gradient bucket; each bucket is one all-reduce
};

class ReplicatedModule {
 public:
  // Replica 0 is `module` itself (not copied); replica d > 0 is module->clone(devices[d]), with the master's
  // requires_grad flags. The master's current gradients are replaced by (zeroed) views of its buffer. Parameters
  // that do not require grad get no gradient view and are left alone. Do not move the replicas (Module::to) or
  // replace their parameter tensors (set_parameters) afterwards: the buffers and optimizers hold the ones seen here.
  // The replicas run in the master's training modes: forward and forward_backward first copy the master's flags
  // (train(), eval(), per submodule) onto the other replicas when any flag changed (Note [Following the master's
  // modes] in nn/module.h).
  // Errors: null module; empty `devices`; a device listed twice or not existing; the module's parameters not all
  // on devices[0]; a module without parameters or not clonable; bucket_size 0.
  ReplicatedModule(std::shared_ptr<nn::Module> module, std::vector<Device> devices, ReplicatedOptions options = {});
  ~ReplicatedModule();  // removes the gradient hooks from the replicas' parameters (the master's included)
  ReplicatedModule(const ReplicatedModule&) = delete;
  ReplicatedModule& operator=(const ReplicatedModule&) = delete;

  const std::vector<Device>& devices() const { return devices_; }
  size_t size() const { return replicas_.size(); }
  const std::shared_ptr<nn::Module>& module() const { return replicas_.front(); }  // the master, replica 0
  const std::vector<std::shared_ptr<nn::Module>>& replicas() const { return replicas_; }

  // Runs replica i on inputs[i] (on devices[i]) with parallel_apply. Fewer inputs than devices (a batch with fewer
  // rows than devices) runs the first inputs.size() replicas; the others contribute zero gradients.
  // Errors: no inputs or more inputs than devices; input i not on devices[i]; a replica's exception (as
  // parallel_apply).
  std::vector<Tensor> forward(const std::vector<Tensor>& inputs);

  // Forward, loss and backward of every replica, each on its device's worker thread and all at once, and the sum of
  // the replicas' gradients: afterwards every replica's .grad holds the sum over replicas, as after
  // reduce_gradients(), which then has nothing left to do. The replicas' graphs are independent (each replica's
  // parameters are its own leaves), so each backward runs beside the others, and each bucket is summed while
  // backward goes on (Note [Overlapped gradient reduction]). loss(i, output) returns replica i's loss, a one-element
  // tensor on devices[i]; for the gradient of a mean loss over the whole batch, weight it by the replica's share of
  // the rows; it must not run backward itself. Returns the losses (detached). Gradients accumulate across calls
  // without zero_grad() as on one device: when the buffers already hold sums, those count once (Note [Accumulating
  // onto sums] in replicated.cpp). Same input rules and errors as forward(); also an error: a parameter that
  // receives two gradients in one call (found after the second one is accumulated: zero_grad() before going on).
  std::vector<Tensor> forward_backward(const std::vector<Tensor>& inputs,
                                       const std::function<Tensor(size_t replica, const Tensor& output)>& loss);

  // Sums the replicas' gradients: afterwards every replica's .grad holds the sum over replicas (one all_reduce per
  // bucket). Does nothing when they are sums already (after forward_backward, or after reduce_gradients() with no
  // backward since).
  void reduce_gradients();
  // Zeroes every gradient buffer in place (and reinstalls the gradient views where something replaced them).
  void zero_grad();
  // Copies the master's parameter values into every other replica (after changing the master outside of
  // ReplicatedSGD, e.g. loading a checkpoint into module()).
  void sync_parameters();

  size_t bucket_count() const { return buckets_.size(); }
  // Replica d's flat gradient buffer (1-D, every parameter's gradient in parameters() order).
  const Tensor& gradient_buffer(size_t replica) const;

 private:
  struct Bucket {
    int64_t start;   // in elements of the flat buffers
    int64_t length;
    size_t parameters;  // how many parameters' gradients it holds
  };
  struct Step;  // one forward_backward's reduction state (replicated.cpp)

  bool install_gradient_views(bool zero);
  void check_inputs(const std::vector<Tensor>& inputs, const char* caller) const;
  void start_step(size_t active);
  void on_gradient(size_t replica, size_t parameter);
  void launch_bucket(Step& step, size_t bucket);
  void finish_step();
  void follow_master_modes();

  std::vector<Device> devices_;
  std::vector<std::shared_ptr<nn::Module>> replicas_;
  std::vector<std::string> names_;                   // [parameter]
  std::vector<std::vector<Tensor>> parameters_;      // [replica][parameter]
  std::vector<Tensor> buffers_;                      // [replica]: flat gradient buffer
  std::vector<std::vector<Tensor>> gradient_views_;  // [replica][parameter]: views into buffers_[replica]
  std::vector<Bucket> buckets_;                      // from the last parameters to the first
  std::vector<size_t> bucket_of_;                    // [parameter]: its bucket (parameters that require grad)
  std::vector<std::vector<Tensor>> bucket_slices_;   // [bucket][replica]: the bucket's slice of buffers_[replica]
  std::vector<std::vector<uint64_t>> hooks_;         // [replica][parameter]: gradient hook handle, 0 for none
  std::unique_ptr<Step> step_;                       // set while forward_backward runs the replicas
  std::atomic<bool> summed_{false};                  // the buffers hold sums, no gradient accumulated since
  uint64_t modes_generation_ = ~uint64_t{0};         // nn::Module::training_mode_generation() at the last copy
};

// One optim::SGD per replica with the same options. After ReplicatedModule::reduce_gradients() every replica has
// the same gradients, so identical steps keep the replicas identical. `model` must outlive the optimizer.
class ReplicatedSGD {
 public:
  ReplicatedSGD(ReplicatedModule& model, optim::SGDOptions options);

  void step();       // steps every replica's optimizer
  void zero_grad();  // model.zero_grad()
  void set_lr(double lr);
  const optim::SGDOptions& options() const { return optimizers_.front().options(); }
  // Replica d's optimizer; replica 0's updates the master.
  optim::SGD& optimizer(size_t replica);

  // Checkpoint state: the master's momentum buffers; setting them sets every replica's (values copied).
  std::vector<Tensor> momentum_buffers() const { return optimizers_.front().momentum_buffers(); }
  void set_momentum_buffers(const std::vector<Tensor>& buffers);

 private:
  ReplicatedModule& model_;
  std::vector<optim::SGD> optimizers_;
};

}  // namespace tandem::parallel
