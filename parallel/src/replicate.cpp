#include "tandem/parallel/replicate.h"

#include "device_checks.h"
#include "tandem/core/autograd.h"
#include "tandem/core/error.h"
#include "tandem/core/grad_mode.h"
#include "tandem/parallel/functions.h"

namespace tandem::parallel {

namespace {

// Note [Replica buffers]: as in PyTorch's DataParallel, the master's buffers are the ones that count. A replica on
// the device where a buffer lives uses the master's tensor itself, so its in-place updates (BatchNorm's running
// statistics) reach the master; replicas on other devices get copies, whose updates are dropped with the replica.
std::vector<Tensor> replica_buffers(const std::vector<Tensor>& buffers, Device device) {
  NoGradGuard no_grad;
  std::vector<Tensor> out;
  out.reserve(buffers.size());
  for (const Tensor& buffer : buffers) out.push_back(buffer.device() == device ? buffer : buffer.to(device));
  return out;
}

}  // namespace

// Note [Replica gradient edges]: all master parameters go through ONE Broadcast node, whose outputs become the
// replicas' parameters. Backward over every replica's loss therefore meets in that node, which runs once with the
// gradients of all replicas and sums them with a single reduce_add_coalesced onto the master's device, from where
// they flow into the master parameters' AccumulateGrad. The Broadcast saves no tensors, so separate backward passes
// (one per replica's loss) may each run it: the replicas that a pass does not reach contribute zeros, and the
// master's .grad accumulates the sum pass by pass (Note [Saved tensors] in core/src/autograd/function.cpp).
// (Replicas built from detached copies instead would leave the master without gradients.)
std::vector<std::shared_ptr<nn::Module>> replicate(const std::shared_ptr<nn::Module>& module,
                                                   const std::vector<Device>& devices, size_t buffer_size) {
  constexpr const char* fn = "parallel::replicate";
  TANDEM_CHECK(module != nullptr, fn, ": module is null");
  if (devices.empty()) return {};
  check_distinct(devices, fn);
  for (const Device& device : devices) check_device_available(device, fn);

  const std::vector<std::pair<std::string, Tensor>> named = module->named_parameters();
  std::vector<Tensor> parameters;
  parameters.reserve(named.size());
  for (const auto& [name, parameter] : named) parameters.push_back(parameter);
  if (!named.empty()) {
    detail::check_parameters_on(named, named.front().second.device(), fn,
                                "where '" + named.front().first + "' is; all parameters must be on one device");
  }

  std::vector<std::shared_ptr<nn::Module>> replicas;
  replicas.reserve(devices.size());
  const std::vector<Tensor> copies = parameters.empty()
      ? std::vector<Tensor>{}
      : autograd::apply(std::make_shared<Broadcast>(devices, buffer_size), parameters);
  const auto count = static_cast<std::ptrdiff_t>(parameters.size());
  const std::vector<Tensor> buffers = module->buffers();
  try {
    for (size_t d = 0; d < devices.size(); ++d) {
      const auto first = copies.begin() + static_cast<std::ptrdiff_t>(d) * count;
      replicas.push_back(module->clone_with_parameters(std::vector<Tensor>(first, first + count)));
      if (!buffers.empty()) replicas.back()->set_buffers(replica_buffers(buffers, devices[d]));
    }
  } catch (const Error& e) {  // a module that is not clonable
    TANDEM_FAIL(fn, ": ", e.what());
  }
  return replicas;
}

}  // namespace tandem::parallel
