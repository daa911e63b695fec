#include "tandem/parallel/replicated.h"

#include <algorithm>
#include <string>

#include "device_checks.h"
#include "scatter_each.h"
#include "tandem/core/autograd.h"
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
  const size_t world = std::max<size_t>(options.collective.scatter_devices, 1);
  GradientLayout layout(named, options.bucket_size, world);
  // Staged buckets (zero_stage 2) keep each device's shard only, and no gradient views (Note [Staged gradient
  // buckets] in gradient_reducer.h).
  const bool staged = options.collective.shards_gradients;

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
    buffers.push_back(
        Tensor::zeros({staged ? layout.numel() / static_cast<int64_t>(world) : layout.numel()}, devices_[d]));
    std::vector<Tensor> views(layout.parameter_count());
    for (size_t i = 0; i < views.size() && !staged; ++i) {
      if (layout.has_place(i)) views[i] = layout.gradient_view(buffers.back(), i);
    }
    gradient_views_.push_back(std::move(views));
  }
  // What this constructor sets on the replicas' parameters besides the reducer's hooks (which its destructor
  // removes), undone should a later part throw: the destructor does not run for a constructor that threw.
  std::vector<std::function<void()>> undo;
  try {
    for (size_t d = 0; d < replicas_.size(); ++d) {
      for (size_t i = 0; i < parameters_[d].size(); ++i) {
        if (!layout.has_place(i)) continue;
        const Tensor& parameter = parameters_[d][i];
        parameter.set_grad_check([this, i](const std::string& user) { check_reduced(user, i); });
        undo.emplace_back([parameter] { parameter.set_grad_check(nullptr); });
      }
    }
    reducer_ = std::make_unique<GradientReducer>(std::move(layout), std::move(buffers), std::move(options.collective));
    install_gradient_views(/*zero=*/true);
    // The view keepers run before the reducer's readiness hooks (hooks run in registration order), so a bucket is
    // summed from the buffer only once every gradient in it is there.
    view_hooks_.resize(replicas_.size());
    for (size_t d = 0; d < replicas_.size(); ++d) {
      for (size_t i = 0; i < parameters_[d].size(); ++i) {
        if (!gradient_views_[d][i].defined()) continue;
        const Tensor& parameter = parameters_[d][i];
        const uint64_t handle =
            parameter.register_post_accumulate_grad_hook([this, d, i](const Tensor&) { keep_gradient_view(d, i); });
        view_hooks_[d].push_back(handle);
        undo.emplace_back([parameter, handle] { parameter.remove_post_accumulate_grad_hook(handle); });
      }
      reducer_->install_hooks(d, parameters_[d]);
    }
    register_module("module", std::shared_ptr<nn::Module>(replicas_.front()));
  } catch (...) {
    for (auto step = undo.rbegin(); step != undo.rend(); ++step) (*step)();
    throw;
  }
}

ReplicatedModule::~ReplicatedModule() {
  const GradientLayout& layout = reducer_->layout();
  for (size_t d = 0; d < replicas_.size(); ++d) {
    size_t hook = 0;
    for (size_t i = 0; i < parameters_[d].size(); ++i) {
      if (!layout.has_place(i)) continue;
      parameters_[d][i].set_grad_check(nullptr);
      if (gradient_views_[d][i].defined()) parameters_[d][i].remove_post_accumulate_grad_hook(view_hooks_[d][hook++]);
    }
  }
}

const std::vector<std::shared_ptr<nn::Module>>& ReplicatedModule::replicas() const {
  follow_master_modes();
  return replicas_;
}

// Called right after backward accumulated replica d's gradient of parameter i: when something replaced the view
// installed as .grad (an optimizer's zero_grad() between forward and backward), the gradient goes back into the
// buffer, where the reduction reads it, and the view becomes .grad again.
void ReplicatedModule::keep_gradient_view(size_t replica, size_t parameter) {
  Tensor view = gradient_views_[replica][parameter];
  const Tensor& owner = parameters_[replica][parameter];
  if (owner.impl()->grad == view.impl_ptr()) return;
  NoGradGuard no_grad;
  view.copy_(owner.grad());
  owner.set_grad(view);
}

// Note [Unreduced gradients are refused] in replicated.h. Reduce-scattered gradients are refused to every user of the
// parameters' .grad: only the sharded optimizer reads them, from the buffers (check_gradients_reduced).
void ReplicatedModule::check_reduced(const std::string& user, size_t parameter) const {
  TANDEM_CHECK(reducer_->collective().scatter_devices == 0, user, ": the gradient of '",
               reducer_->layout().name(parameter), "' is reduce-scattered (DistributedOptions::zero_stage >= 1): each ",
               "device holds only its shard of the reduced gradients, which a plain optimizer over the parameters ",
               "cannot step; step with parallel::ShardedOptimizer (ShardedSGD, ShardedAdam, ShardedAdamW)");
  check_unreduced(user, parameter);
}

void ReplicatedModule::check_gradients_reduced(const std::string& user) const {
  const GradientLayout& layout = reducer_->layout();
  for (size_t i = 0; i < layout.parameter_count(); ++i) {
    if (!layout.has_place(i)) continue;
    check_unreduced(user, i);
    return;
  }
}

void ReplicatedModule::check_unreduced(const std::string& user, size_t parameter) const {
  if (!reducer_->holds_unreduced_gradients()) return;
  const char* cause = "";
  switch (unreduced_cause_) {
    case UnreducedCause::NoSync:
      cause =
          "the last backward ran inside no_sync(), which keeps each replica's gradients local; run a backward "
          "outside no_sync() (it reduces everything accumulated) before stepping";
      break;
    case UnreducedCause::StepNotFinished:
      cause =
          "the backward after the last forward did not finish, so its reduction is incomplete; zero the "
          "gradients and run the step again";
      break;
    case UnreducedCause::BackwardWithoutForward:
      cause =
          "a backward ran after the step's reduction had closed (a second backward after one forward?); each "
          "forward opens one reduction, which its backward closes";
      break;
  }
  TANDEM_CHECK(false, user, ": the gradient of '", reducer_->layout().name(parameter), "' is not reduced over the ",
               spans_processes() ? "processes" : "replicas", " of ", name(), ": ", cause);
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

std::vector<Tensor> ReplicatedModule::forward_replicas(const std::vector<Tensor>& inputs) {
  check_inputs(inputs, "forward_replicas");
  follow_master_modes();
  sync_buffers();
  const std::vector<std::shared_ptr<nn::Module>> used(replicas_.begin(),
                                                      replicas_.begin() + static_cast<std::ptrdiff_t>(inputs.size()));
  return parallel_apply(used, inputs);
}

Tensor ReplicatedModule::forward(const Tensor& input) {
  return nn::detail::single_output(*this, forward_all({input}), "parallel::ReplicatedModule::forward");
}

std::vector<Tensor> ReplicatedModule::forward_all(const std::vector<Tensor>& inputs) {
  constexpr const char* fn = "parallel::ReplicatedModule::forward";
  TANDEM_CHECK(!inputs.empty(), fn, ": got no inputs");
  for (size_t j = 0; j < inputs.size(); ++j) TANDEM_CHECK(inputs[j].defined(), fn, ": input ", j, " is undefined");
  drop_unfinished_step();
  std::vector<std::vector<Tensor>> chunks;  // [replica][input]
  // With one device, or no rows to share (a process without rows of this batch), the master runs alone.
  const bool alone = replicas_.size() == 1 || (inputs.front().dim() > 0 && inputs.front().size(0) == 0);
  if (alone) {
    chunks.emplace_back();
    for (const Tensor& input : inputs) chunks.back().push_back(input.to(devices_.front()));
  } else {
    chunks = detail::scatter_each(inputs, devices_, 0, fn);
  }
  std::vector<std::vector<Tensor>> outputs = run_module_form(chunks);
  if (GradMode::is_enabled()) {
    prepare_buffers(chunks.size(), /*reduce=*/syncing_, {},
                    [this] { autograd::queue_callback([this] { close_step_after_backward(); }); });
    module_step_ = reducer_->step_open();
  }
  if (alone) return std::move(outputs.front());
  return detail::gather_each(outputs, devices_.front(), 0, fn);
}

// The replicas' forward of the module form: the master's modes, buffers and parameter values first.
std::vector<std::vector<Tensor>> ReplicatedModule::run_module_form(const std::vector<std::vector<Tensor>>& chunks) {
  follow_master_modes();
  sync_buffers();
  sync_parameters();
  if (chunks.size() == 1) return {replicas_.front()->forward_all(chunks.front())};
  const std::vector<std::shared_ptr<nn::Module>> used(replicas_.begin(),
                                                      replicas_.begin() + static_cast<std::ptrdiff_t>(chunks.size()));
  const std::vector<Device> devices(devices_.begin(), devices_.begin() + static_cast<std::ptrdiff_t>(chunks.size()));
  return parallel_apply(used, chunks, devices);
}

// Note [Closing the step at the end of backward] in replicated.h: a step left open by the previous forward is
// dropped when no gradient reached it, and discarded with an Error when its backward began but did not finish.
void ReplicatedModule::drop_unfinished_step() {
  if (!reducer_->step_open()) return;
  TANDEM_CHECK(module_step_, "parallel::", name(), "::forward: the step opened by prepare_for_backward() is still ",
               "open; call reduce_gradients() after the backward");
  const bool partial = reducer_->step_received_gradients();
  reducer_->abandon();
  module_step_ = false;
  if (!partial) return;
  install_gradient_views(/*zero=*/true);
  reducer_->zero_staged();
  reducer_->buffers_changed();
  reducer_->gradients_discarded();
  TANDEM_CHECK(false, "parallel::", name(), "::forward: the backward of the previous forward did not finish (it ",
               "threw?), so its gradients were partial; they were discarded (zeroed). Run the step again");
}

// The callback the first gradient of a module-form step queues on the running backward pass.
void ReplicatedModule::close_step_after_backward() {
  for (size_t d = 0; d < replicas_.size(); ++d) zero_stale_gradients(d);
  module_step_ = false;
  reducer_->finish();
  unreduced_cause_ = UnreducedCause::BackwardWithoutForward;
  if (find_unused_parameters_) return;
  const std::vector<size_t> missing = reducer_->missing_gradients();
  if (missing.empty()) return;
  std::string names;
  for (size_t k = 0; k < missing.size() && k < 5; ++k)
    names += (k ? ", '" : "'") + reducer_->layout().name(missing[k]) + "'";
  if (missing.size() > 5) names += " and " + std::to_string(missing.size() - 5) + " more";
  TANDEM_CHECK(false, "parallel::", name(), ": ", missing.size(), " parameter", missing.size() == 1 ? "" : "s",
               " got no gradient in this backward (", names,
               "), but find_unused_parameters is false; the gradients "
               "were reduced with zeros for them. Construct with find_unused_parameters = true when the model leaves "
               "parameters unused in a step");
}

// Note [Following the master's modes] in nn/module.h.
void ReplicatedModule::follow_master_modes() const {
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
// A view replaced since the last reduction is copied back without counting as a change of the other buffers: they
// still hold the sums, which Note [Accumulating onto sums] clears where they must not count again (an optimizer's
// zero_grad() clears the master's gradients only).
void ReplicatedModule::prepare_buffers(size_t active, bool reduce, const GradientReducer::BucketStarted& bucket_started,
                                       GradientReducer::FirstGradient first_gradient) {
  install_gradient_views(/*zero=*/false);
  for (size_t d = active; d < replicas_.size(); ++d) zero_stale_gradients(d);  // they take part as they are
  if (reduce) {
    reducer_->begin(active, bucket_started, std::move(first_gradient));
    unreduced_cause_ = UnreducedCause::StepNotFinished;
  } else {
    reducer_->prepare_to_accumulate();
    unreduced_cause_ = UnreducedCause::NoSync;
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
    unreduced_cause_ = UnreducedCause::BackwardWithoutForward;
  }
  return losses;
}

void ReplicatedModule::reduce_gradients() {
  const bool open = reducer_->step_open();
  module_step_ = false;
  if (!open && install_gradient_views(/*zero=*/false)) reducer_->buffers_changed();
  for (size_t d = 0; d < replicas_.size(); ++d) zero_stale_gradients(d);
  if (open) {
    reducer_->finish();
  } else {
    reducer_->reduce();
  }
  unreduced_cause_ = UnreducedCause::BackwardWithoutForward;
}

void ReplicatedModule::zero_grad() {
  if (module_step_) {  // zeroing discards whatever the module form's open step holds
    reducer_->abandon();
    module_step_ = false;
  }
  check_no_step_open("zero_grad");
  install_gradient_views(/*zero=*/true);
  reducer_->zero_staged();
  reducer_->buffers_changed();
  reducer_->gradients_discarded();
}

ReplicatedModule::NoSync::NoSync(ReplicatedModule& model) : model_(model), previous_(model.syncing_) {
  model_.syncing_ = false;
}

ReplicatedModule::NoSync::~NoSync() { model_.syncing_ = previous_; }

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
