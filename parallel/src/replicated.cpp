#include "tandem/parallel/replicated.h"

#include "device_checks.h"
#include "tandem/comm/comm.h"
#include "tandem/core/error.h"
#include "tandem/core/grad_mode.h"
#include "tandem/parallel/parallel_apply.h"

namespace tandem::parallel {

namespace {
constexpr const char* kName = "parallel::ReplicatedModule";
}  // namespace

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
  std::vector<Shape> shapes;
  std::vector<int64_t> offsets;
  int64_t total = 0;
  for (const auto& [name, parameter] : named) {
    if (!parameter.requires_grad()) {
      offsets.push_back(-1);
      continue;
    }
    offsets.push_back(total);
    shapes.push_back(parameter.shape());
    const int64_t numel = parameter.numel();
    const auto max_elements = static_cast<int64_t>(options.bucket_size / element_size(parameter.dtype()));
    if (buckets_.empty() || (buckets_.back().length > 0 && buckets_.back().length + numel > max_elements))
      buckets_.push_back({total, 0});
    buckets_.back().length += numel;
    total += numel;
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
  install_gradient_views(/*zero=*/true);
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
  const std::vector<std::shared_ptr<nn::Module>> used(replicas_.begin(),
                                                      replicas_.begin() + static_cast<std::ptrdiff_t>(inputs.size()));
  return parallel_apply(used, inputs);
}

std::vector<Tensor> ReplicatedModule::forward_backward(
    const std::vector<Tensor>& inputs, const std::function<Tensor(size_t replica, const Tensor& output)>& loss) {
  check_inputs(inputs, "forward_backward");
  std::vector<Tensor> losses(inputs.size());
  std::vector<std::function<void()>> tasks;
  for (size_t i = 0; i < inputs.size(); ++i) {
    tasks.emplace_back([&, i] {
      Tensor replica_loss = loss(i, replicas_[i]->forward(inputs[i]));
      replica_loss.backward();
      losses[i] = replica_loss.detach();
    });
  }
  run_on_devices(tasks, std::vector<Device>(devices_.begin(), devices_.begin() + static_cast<std::ptrdiff_t>(inputs.size())));
  return losses;
}

void ReplicatedModule::reduce_gradients() {
  install_gradient_views(/*zero=*/false);
  if (replicas_.size() == 1) return;
  std::vector<Tensor> slices(buffers_.size());
  for (const Bucket& bucket : buckets_) {
    for (size_t d = 0; d < buffers_.size(); ++d) slices[d] = buffers_[d].narrow(0, bucket.start, bucket.length);
    comm::all_reduce(slices);
  }
}

void ReplicatedModule::zero_grad() { install_gradient_views(/*zero=*/true); }

// See Note [Flat gradient buffers] in replicated.h. With `zero`, every buffer is zeroed; otherwise a gradient that
// replaced a view is copied into it first (a view whose parameter lost its gradient is zeroed).
void ReplicatedModule::install_gradient_views(bool zero) {
  NoGradGuard no_grad;
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
    }
    if (zero) buffers_[d].zero_();
  }
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
