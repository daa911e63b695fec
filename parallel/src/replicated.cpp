#include "tandem/parallel/replicated.h"

#include "device_checks.h"
#include "tandem/core/error.h"
#include "tandem/core/grad_mode.h"
#include "tandem/parallel/parallel_apply.h"

namespace tandem::parallel {

namespace {
constexpr const char* kReplicatedModule = "parallel::ReplicatedModule";
}  // namespace

ReplicatedModule::ReplicatedModule(std::shared_ptr<nn::Module> module, std::vector<Device> devices,
                                   ReplicatedOptions options)
    : devices_(std::move(devices)) {
  TANDEM_CHECK(module != nullptr, kReplicatedModule, ": module is null");
  TANDEM_CHECK(!devices_.empty(), kReplicatedModule, ": got no devices");
  check_distinct(devices_, kReplicatedModule);
  for (const Device& device : devices_) check_device_available(device, kReplicatedModule);
  const auto named = module->named_parameters();
  TANDEM_CHECK(!named.empty(), kReplicatedModule, ": ", module->name(), " has no parameters");
  detail::check_parameters_on(named, devices_.front(), kReplicatedModule, "devices[0]");
  GradientLayout layout(named, options.bucket_size);

  replicas_.push_back(std::move(module));
  for (size_t d = 1; d < devices_.size(); ++d) {
    replicas_.push_back(replicas_.front()->clone(devices_[d]));
    // clone() makes every copy trainable; frozen master parameters stay frozen in every replica.
    const std::vector<Tensor> copies = replicas_.back()->parameters();
    for (size_t i = 0; i < copies.size(); ++i) Tensor(copies[i]).set_requires_grad(named[i].second.requires_grad());
  }

  std::vector<Tensor> buffers;
  for (size_t d = 0; d < replicas_.size(); ++d) {
    parameters_.push_back(replicas_[d]->parameters());
    buffers_.push_back(replicas_[d]->buffers());
    buffers.push_back(Tensor::zeros({layout.numel()}, devices_[d]));
    std::vector<Tensor> views(layout.parameter_count());
    for (size_t i = 0; i < views.size(); ++i) {
      if (layout.has_place(i)) views[i] = layout.gradient_view(buffers.back(), i);
    }
    gradient_views_.push_back(std::move(views));
  }
  reducer_ = std::make_unique<GradientReducer>(std::move(layout), std::move(buffers), std::move(options.collective));
  install_gradient_views(/*zero=*/true);
  for (size_t d = 0; d < replicas_.size(); ++d) reducer_->install_hooks(d, parameters_[d]);
}

void ReplicatedModule::check_inputs(const std::vector<Tensor>& inputs, const char* caller) const {
  TANDEM_CHECK(!inputs.empty() && inputs.size() <= replicas_.size(), kReplicatedModule, "::", caller, ": got ",
               inputs.size(), " inputs for ", replicas_.size(), " replicas");
  for (size_t i = 0; i < inputs.size(); ++i) {
    TANDEM_CHECK(inputs[i].defined(), kReplicatedModule, "::", caller, ": input ", i, " is undefined");
    TANDEM_CHECK(inputs[i].device() == devices_[i], kReplicatedModule, "::", caller, ": input ", i, " is on ",
                 inputs[i].device(), " but replica ", i, " is on ", devices_[i]);
  }
}

std::vector<Tensor> ReplicatedModule::forward(const std::vector<Tensor>& inputs) {
  check_inputs(inputs, "forward");
  follow_master_modes();
  sync_buffers();
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

void ReplicatedModule::check_no_step_open(const char* caller) const {
  TANDEM_CHECK(!reducer_->step_open(), kReplicatedModule, "::", caller,
               ": the step opened by prepare_for_backward() is still open; call reduce_gradients() after the backward");
}

// The buffers are ready for a backward of replicas 0..active-1: views reinstalled, and either a step open or the
// sums prepared to be accumulated onto.
void ReplicatedModule::prepare_buffers(size_t active, bool reduce,
                                       const GradientReducer::BucketStarted& bucket_started) {
  if (install_gradient_views(/*zero=*/false)) reducer_->buffers_changed();
  for (size_t d = active; d < replicas_.size(); ++d) zero_stale_gradients(d);  // they take part as they are
  if (reduce) {
    reducer_->begin(active, bucket_started);
  } else {
    reducer_->prepare_to_accumulate();
  }
}

void ReplicatedModule::prepare_for_backward(size_t active, bool reduce) {
  check_no_step_open("prepare_for_backward");
  TANDEM_CHECK(active <= replicas_.size(), kReplicatedModule, "::prepare_for_backward: got ", active,
               " active replicas but there are ", replicas_.size());
  prepare_buffers(active, reduce);
}

std::vector<Tensor> ReplicatedModule::forward_backward(
    const std::vector<Tensor>& inputs, const std::function<Tensor(size_t replica, const Tensor& output)>& loss,
    bool reduce, ReplicaThreads threads, const std::vector<Tensor>& seeds,
    const GradientReducer::BucketStarted& bucket_started) {
  check_inputs(inputs, "forward_backward");
  check_no_step_open("forward_backward");
  TANDEM_CHECK(seeds.empty() || seeds.size() == inputs.size(), kReplicatedModule, "::forward_backward: got ",
               seeds.size(), " seeds for ", inputs.size(), " inputs but expected one per input (or none)");
  TANDEM_CHECK(reduce || !bucket_started, kReplicatedModule,
               "::forward_backward: got a bucket callback with reduce false, but buckets are summed only when ",
               "reducing");
  follow_master_modes();
  sync_buffers();
  prepare_buffers(inputs.size(), reduce, bucket_started);

  std::vector<Tensor> losses(inputs.size());
  std::vector<std::function<void()>> tasks;
  for (size_t i = 0; i < inputs.size(); ++i) {
    tasks.emplace_back([&, i] {
      Tensor replica_loss = loss(i, replicas_[i]->forward(inputs[i]));
      replica_loss.backward(seeds.empty() || !replica_loss.defined() ? Tensor()
                                                                     : seeds[i].reshape(replica_loss.shape()));
      losses[i] = replica_loss.detach();
    });
  }
  const std::vector<Device> used(devices_.begin(), devices_.begin() + static_cast<std::ptrdiff_t>(inputs.size()));
  try {
    run_on_devices(tasks, used, threads);
  } catch (...) {
    reducer_->abandon();  // the gradients are partial (abandon does nothing without a step)
    throw;
  }
  if (reduce) {
    for (size_t d = 0; d < replicas_.size(); ++d) zero_stale_gradients(d);
    reducer_->finish();
  }
  return losses;
}

void ReplicatedModule::reduce_gradients() {
  const bool open = reducer_->step_open();
  if (!open && install_gradient_views(/*zero=*/false)) reducer_->buffers_changed();
  for (size_t d = 0; d < replicas_.size(); ++d) zero_stale_gradients(d);
  if (open) {
    reducer_->finish();
  } else {
    reducer_->reduce();
  }
}

void ReplicatedModule::zero_grad() {
  check_no_step_open("zero_grad");
  install_gradient_views(/*zero=*/true);
  reducer_->buffers_changed();
}

// See Note [Flat gradient buffers] in gradient_layout.h. With `zero`, every view is marked stale (Note [Zeroing by
// marking]); otherwise a gradient that replaced a view is copied into it first (a view whose parameter lost its
// gradient is zeroed). Returns whether any view had been replaced.
bool ReplicatedModule::install_gradient_views(bool zero) {
  NoGradGuard no_grad;
  bool replaced = false;
  for (size_t d = 0; d < replicas_.size(); ++d) {
    for (size_t i = 0; i < parameters_[d].size(); ++i) {
      Tensor& view = gradient_views_[d][i];
      if (!view.defined()) continue;
      const Tensor& parameter = parameters_[d][i];
      // The installed view is recognized by its handle, without Tensor::grad(), which would zero a stale one.
      if (parameter.impl()->grad == view.impl_ptr()) {
        if (zero) parameter.mark_grad_stale();
        continue;
      }
      if (!zero) {
        const Tensor grad = parameter.grad();
        if (grad.defined()) {
          view.copy_(grad);
        } else {
          view.zero_();
        }
      }
      parameter.set_grad(view);
      if (zero) parameter.mark_grad_stale();
      replaced = true;
    }
  }
  return replaced;
}

// Note [Zeroing by marking]: zero_grad() writes nothing: it marks every gradient view stale (Note [Stale gradients]
// in tandem/core/tensor.h), and backward writes each gradient over its view (a linear layer's weight gradient with
// beta = 0, the others copied by their accumulators), so a training step makes no pass that zeroes the buffers.
// Views still stale when their values are about to count are zeroed then, here: before a reduction sums the buffers
// (the parameters that got no gradient in the step), for the replicas that take no part in a backward (fewer inputs
// than devices), and when gradient_buffer() hands a buffer out. A bucket that the overlapped reduction starts during
// backward holds no stale view: it starts only when every gradient in it has been accumulated, which clears the mark.
void ReplicatedModule::zero_stale_gradients(size_t replica) const {
  for (size_t i = 0; i < parameters_[replica].size(); ++i) {
    const Tensor& parameter = parameters_[replica][i];
    if (gradient_views_[replica][i].defined() && parameter.grad_is_stale()) (void)parameter.grad();  // zeroes it
  }
}

void ReplicatedModule::sync_parameters() {
  NoGradGuard no_grad;
  for (size_t d = 1; d < replicas_.size(); ++d)
    for (size_t i = 0; i < parameters_[d].size(); ++i) parameters_[d][i].copy_(parameters_[0][i]);
}

void ReplicatedModule::sync_buffers() {
  NoGradGuard no_grad;
  for (size_t d = 1; d < replicas_.size(); ++d)
    for (size_t i = 0; i < buffers_[d].size(); ++i) buffers_[d][i].copy_(buffers_[0][i]);
}

bool ReplicatedModule::sums_on_comm_streams() const {
  if (spans_processes()) return false;
  for (const Device& device : devices_) {
    if (device.type() != devices_.front().type()) return false;
  }
  return true;
}

const Tensor& ReplicatedModule::gradient_buffer(size_t replica) const {
  TANDEM_CHECK(replica < replicas_.size(), kReplicatedModule, "::gradient_buffer: replica ", replica, " but there are ",
               replicas_.size());
  zero_stale_gradients(replica);
  return reducer_->buffers()[replica];
}

}  // namespace tandem::parallel
