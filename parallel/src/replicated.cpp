#include "tandem/parallel/replicated.h"

#include <limits>

#include "device_checks.h"
#include "tandem/comm/comm.h"
#include "tandem/core/error.h"
#include "tandem/core/grad_mode.h"
#include "tandem/core/stream_marker.h"
#include "tandem/parallel/parallel_apply.h"

namespace tandem::parallel {

namespace {
constexpr const char* kName = "parallel::ReplicatedModule";
constexpr size_t kNoBucket = std::numeric_limits<size_t>::max();
}  // namespace

// What forward_backward tracks while the replicas run (Note [Overlapped gradient reduction] in replicated.h).
struct ReplicatedModule::Step {
  Step(size_t buckets, size_t replicas, size_t parameters)
      : missing(buckets, std::vector<size_t>(replicas, 0)),
        arrived(replicas, std::vector<char>(parameters, 0)),
        replicas_missing(buckets),
        ready(buckets, std::vector<StreamMarker>(replicas)),
        works(buckets),
        launched(buckets, 0) {}

  // Touched only by the thread running that replica's backward:
  std::vector<std::vector<size_t>> missing;  // [bucket][replica]: gradients of the bucket still to come
  std::vector<std::vector<char>> arrived;    // [replica][parameter]: whether its gradient came
  // Shared by the replicas' threads: the thread that takes replicas_missing[b] to zero launches bucket b, after
  // every other replica stored its marker in ready[b] (acquire-release on the counter orders those stores).
  std::vector<std::atomic<size_t>> replicas_missing;  // [bucket]: replicas whose part of the bucket is not final
  std::vector<std::vector<StreamMarker>> ready;       // [bucket][replica]: where that part became final
  // Written by the launching thread, read by forward_backward once every replica has finished:
  std::vector<comm::AllReduceWork> works;  // [bucket]
  std::vector<char> launched;              // [bucket]
};

ReplicatedModule::ReplicatedModule(std::shared_ptr<nn::Module> module, std::vector<Device> devices,
                                   ReplicatedOptions options)
    : devices_(std::move(devices)) {
  TANDEM_CHECK(module != nullptr, kName, ": module is null");
  TANDEM_CHECK(!devices_.empty(), kName, ": got no devices");
  TANDEM_CHECK(options.bucket_size > 0, kName, ": bucket_size is 0 but expected > 0");
  detail::check_distinct_devices(devices_, kName);
  for (const Device& device : devices_) check_device_available(device, kName);
  const auto named = module->named_parameters();
  TANDEM_CHECK(!named.empty(), kName, ": ", module->name(), " has no parameters");
  for (const auto& [name, parameter] : named) {
    TANDEM_CHECK(parameter.device() == devices_.front(), kName, ": parameter '", name, "' is on ", parameter.device(),
                 " but expected ", devices_.front(), " (devices[0])");
  }

  replicas_.push_back(std::move(module));
  for (size_t d = 1; d < devices_.size(); ++d) {
    replicas_.push_back(replicas_.front()->clone(devices_[d]));
    // clone() makes every copy trainable; frozen master parameters stay frozen in every replica.
    const std::vector<Tensor> copies = replicas_.back()->parameters();
    for (size_t i = 0; i < copies.size(); ++i) Tensor(copies[i]).set_requires_grad(named[i].second.requires_grad());
  }

  // The layout of the flat buffers: every parameter that requires grad, in parameters() order.
  std::vector<int64_t> offsets;
  int64_t total = 0;
  for (const auto& [name, parameter] : named) {
    names_.push_back(name);
    offsets.push_back(parameter.requires_grad() ? total : -1);
    if (parameter.requires_grad()) total += parameter.numel();
  }
  // The buckets, from the last parameter backwards (Note [Flat gradient buffers]); each is a contiguous slice.
  bucket_of_.assign(named.size(), kNoBucket);
  for (size_t i = named.size(); i-- > 0;) {
    if (offsets[i] < 0) continue;
    const Tensor& parameter = named[i].second;
    const int64_t numel = parameter.numel();
    const auto max_elements = static_cast<int64_t>(options.bucket_size / element_size(parameter.dtype()));
    if (buckets_.empty() || (buckets_.back().length > 0 && buckets_.back().length + numel > max_elements))
      buckets_.push_back({offsets[i] + numel, 0, 0});
    Bucket& bucket = buckets_.back();
    bucket.start = offsets[i];
    bucket.length += numel;
    ++bucket.parameters;
    bucket_of_[i] = buckets_.size() - 1;
  }

  for (size_t d = 0; d < replicas_.size(); ++d) {
    parameters_.push_back(replicas_[d]->parameters());
    buffers_.push_back(Tensor::zeros({total}, devices_[d]));
    std::vector<Tensor> views(offsets.size());
    for (size_t i = 0; i < offsets.size(); ++i) {
      if (offsets[i] < 0) continue;
      const Tensor& parameter = parameters_[d][i];
      views[i] = buffers_[d].narrow(0, offsets[i], parameter.numel()).view(parameter.shape());
    }
    gradient_views_.push_back(std::move(views));
  }
  for (const Bucket& bucket : buckets_) {
    bucket_slices_.emplace_back();
    for (const Tensor& buffer : buffers_) {
      bucket_slices_.back().push_back(buffer.narrow(0, bucket.start, bucket.length));
    }
  }
  install_gradient_views(/*zero=*/true);
  for (size_t d = 0; d < replicas_.size(); ++d) {
    hooks_.emplace_back(offsets.size(), 0);
    for (size_t i = 0; i < offsets.size(); ++i) {
      if (offsets[i] < 0) continue;
      hooks_[d][i] = parameters_[d][i].register_post_accumulate_grad_hook([this, d, i](const Tensor&) {
        on_gradient(d, i);
      });
    }
  }
}

ReplicatedModule::~ReplicatedModule() {
  for (size_t d = 0; d < hooks_.size(); ++d) {
    for (size_t i = 0; i < hooks_[d].size(); ++i) {
      if (hooks_[d][i] != 0) parameters_[d][i].remove_post_accumulate_grad_hook(hooks_[d][i]);
    }
  }
}

void ReplicatedModule::check_inputs(const std::vector<Tensor>& inputs, const char* caller) const {
  TANDEM_CHECK(!inputs.empty() && inputs.size() <= replicas_.size(), kName, "::", caller, ": got ", inputs.size(),
               " inputs for ", replicas_.size(), " replicas");
  for (size_t i = 0; i < inputs.size(); ++i) {
    TANDEM_CHECK(inputs[i].defined(), kName, "::", caller, ": input ", i, " is undefined");
    TANDEM_CHECK(inputs[i].device() == devices_[i], kName, "::", caller, ": input ", i, " is on ",
                 inputs[i].device(), " but replica ", i, " is on ", devices_[i]);
  }
}

std::vector<Tensor> ReplicatedModule::forward(const std::vector<Tensor>& inputs) {
  check_inputs(inputs, "forward");
  follow_master_modes();
  const std::vector<std::shared_ptr<nn::Module>> used(replicas_.begin(),
                                                      replicas_.begin() + static_cast<std::ptrdiff_t>(inputs.size()));
  return parallel_apply(used, inputs);
}

// Note [Following the master's modes] in nn/module.h.
void ReplicatedModule::follow_master_modes() {
  const uint64_t generation = nn::Module::training_mode_generation();
  if (generation == modes_generation_) return;
  const std::vector<bool> modes = module()->training_modes();
  for (size_t d = 1; d < replicas_.size(); ++d) replicas_[d]->set_training_modes(modes);
  modes_generation_ = generation;
}

// Note [Accumulating onto sums]: backward adds to the gradient buffers. When forward_backward starts while they hold
// sums over the replicas (no zero_grad() since the last reduction: gradients accumulated over several batches),
// every replica holds the same sum S, and summing the replicas again would count S once per replica. So the
// buffers of replicas 1.. are cleared first: replica 0 keeps S, and this step's all-reduce gives S plus the new
// gradients of every replica, as one device accumulating over the batches would.
std::vector<Tensor> ReplicatedModule::forward_backward(
    const std::vector<Tensor>& inputs, const std::function<Tensor(size_t replica, const Tensor& output)>& loss) {
  check_inputs(inputs, "forward_backward");
  follow_master_modes();
  if (install_gradient_views(/*zero=*/false)) summed_ = false;
  if (summed_) {
    NoGradGuard no_grad;
    for (size_t d = 1; d < buffers_.size(); ++d) buffers_[d].zero_();
  }
  summed_ = false;
  // A single bucket cannot overlap anything: its all-reduce can only start once every backward has finished. It is
  // summed after backward, without the per-gradient bookkeeping of an overlapped step.
  const bool overlap = replicas_.size() > 1 && buckets_.size() > 1;
  if (overlap) start_step(inputs.size());

  std::vector<Tensor> losses(inputs.size());
  std::vector<std::function<void()>> tasks;
  for (size_t i = 0; i < inputs.size(); ++i) {
    tasks.emplace_back([&, i] {
      Tensor replica_loss = loss(i, replicas_[i]->forward(inputs[i]));
      replica_loss.backward();
      losses[i] = replica_loss.detach();
    });
  }
  const std::vector<Device> used(devices_.begin(), devices_.begin() + static_cast<std::ptrdiff_t>(inputs.size()));
  try {
    run_on_devices(tasks, used);
  } catch (...) {
    step_.reset();  // joins the all-reduces already started (AllReduceWork's destructor); the gradients are partial
    throw;
  }
  if (overlap) {
    finish_step();
    summed_ = true;
  } else {
    reduce_gradients();
  }
  return losses;
}

// Replica d's part of every bucket is complete once each of its parameters in the bucket got its gradient; a
// replica without an input this step has its part complete from the start, with the gradients it holds.
void ReplicatedModule::start_step(size_t active) {
  auto step = std::make_unique<Step>(buckets_.size(), replicas_.size(), names_.size());
  for (size_t b = 0; b < buckets_.size(); ++b) {
    for (size_t d = 0; d < active; ++d) step->missing[b][d] = buckets_[b].parameters;
    step->replicas_missing[b].store(active, std::memory_order_relaxed);
  }
  for (size_t d = active; d < replicas_.size(); ++d) {
    const StreamMarker now = StreamMarker::record(devices_[d]);
    for (size_t b = 0; b < buckets_.size(); ++b) step->ready[b][d] = now;
  }
  step_ = std::move(step);  // the workers see it: run_on_devices hands them their tasks after this
}

// The hook of replica `replica`'s parameter `parameter`, run right after backward accumulated its gradient, on the
// thread running that replica's backward.
void ReplicatedModule::on_gradient(size_t replica, size_t parameter) {
  Step* step = step_.get();
  if (step == nullptr) {  // a backward outside forward_backward: the buffers hold new local gradients
    summed_ = false;
    return;
  }
  TANDEM_CHECK(!step->arrived[replica][parameter], kName, "::forward_backward: parameter '", names_[parameter],
               "' of replica ", replica, " received a second gradient in one step, but its bucket is summed once; ",
               "run one backward per replica");
  step->arrived[replica][parameter] = 1;
  const size_t bucket = bucket_of_[parameter];
  if (--step->missing[bucket][replica] > 0) return;
  step->ready[bucket][replica] = StreamMarker::record(devices_[replica]);
  if (step->replicas_missing[bucket].fetch_sub(1, std::memory_order_acq_rel) == 1) launch_bucket(*step, bucket);
}

void ReplicatedModule::launch_bucket(Step& step, size_t bucket) {
  std::vector<Tensor> slices = bucket_slices_[bucket];
  step.works[bucket] = comm::all_reduce_async(slices, step.ready[bucket]);
  step.launched[bucket] = 1;
}

// Runs once every replica has finished: sums the buckets that never became complete (a parameter without gradient
// this step) and joins every bucket's all-reduce into the compute streams (device-side waits; the host goes on).
void ReplicatedModule::finish_step() {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (step_->launched[b]) continue;
    std::vector<Tensor> slices = bucket_slices_[b];
    comm::all_reduce(slices);
  }
  for (comm::AllReduceWork& work : step_->works) work.wait();
  step_.reset();
}

void ReplicatedModule::reduce_gradients() {
  if (install_gradient_views(/*zero=*/false)) summed_ = false;
  if (summed_ || replicas_.size() == 1) return;
  for (const std::vector<Tensor>& bucket : bucket_slices_) {
    std::vector<Tensor> slices = bucket;
    comm::all_reduce(slices);
  }
  summed_ = true;
}

void ReplicatedModule::zero_grad() {
  install_gradient_views(/*zero=*/true);
  summed_ = false;
}

// See Note [Flat gradient buffers] in replicated.h. With `zero`, every buffer is zeroed; otherwise a gradient that
// replaced a view is copied into it first (a view whose parameter lost its gradient is zeroed). Returns whether any
// view had been replaced.
bool ReplicatedModule::install_gradient_views(bool zero) {
  NoGradGuard no_grad;
  bool replaced = false;
  for (size_t d = 0; d < replicas_.size(); ++d) {
    for (size_t i = 0; i < parameters_[d].size(); ++i) {
      Tensor& view = gradient_views_[d][i];
      if (!view.defined()) continue;
      const Tensor& parameter = parameters_[d][i];
      const Tensor grad = parameter.grad();
      if (grad.is_same(view)) continue;
      if (!zero) {
        if (grad.defined()) {
          view.copy_(grad);
        } else {
          view.zero_();
        }
      }
      parameter.set_grad(view);
      replaced = true;
    }
    if (zero) buffers_[d].zero_();
  }
  return replaced;
}

void ReplicatedModule::sync_parameters() {
  NoGradGuard no_grad;
  for (size_t d = 1; d < replicas_.size(); ++d)
    for (size_t i = 0; i < parameters_[d].size(); ++i) parameters_[d][i].copy_(parameters_[0][i]);
}

const Tensor& ReplicatedModule::gradient_buffer(size_t replica) const {
  TANDEM_CHECK(replica < buffers_.size(), kName, "::gradient_buffer: replica ", replica, " but there are ",
               buffers_.size());
  return buffers_[replica];
}

// ---- ReplicatedSGD ------------------------------------------------------------------------------------------------

ReplicatedSGD::ReplicatedSGD(ReplicatedModule& model, optim::SGDOptions options) : model_(model) {
  optimizers_.reserve(model.size());
  for (const std::shared_ptr<nn::Module>& replica : model.replicas())
    optimizers_.emplace_back(replica->parameters(), options);
}

void ReplicatedSGD::step() {
  for (optim::SGD& optimizer : optimizers_) optimizer.step();
}

void ReplicatedSGD::zero_grad() { model_.zero_grad(); }

void ReplicatedSGD::set_lr(double lr) {
  for (optim::SGD& optimizer : optimizers_) optimizer.set_lr(lr);
}

optim::SGD& ReplicatedSGD::optimizer(size_t replica) {
  TANDEM_CHECK(replica < optimizers_.size(), "parallel::ReplicatedSGD::optimizer: replica ", replica,
               " but there are ", optimizers_.size());
  return optimizers_[replica];
}

void ReplicatedSGD::set_momentum_buffers(const std::vector<Tensor>& buffers) {
  for (optim::SGD& optimizer : optimizers_) optimizer.set_momentum_buffers(buffers);
}

}  // namespace tandem::parallel
