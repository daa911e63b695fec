#include "tandem/optim/sgd.h"

#include "tandem/core/error.h"
#include "tandem/core/fused.h"
#include "tandem/core/grad_mode.h"
#include "tandem/core/shape.h"

namespace tandem::optim {
namespace {

void check_options(const SGDOptions& options) {
  TANDEM_CHECK(options.lr >= 0.0, "optim::SGD: lr must be >= 0, got ", options.lr);
  TANDEM_CHECK(options.momentum >= 0.0, "optim::SGD: momentum must be >= 0, got ", options.momentum);
  TANDEM_CHECK(options.weight_decay >= 0.0, "optim::SGD: weight_decay must be >= 0, got ", options.weight_decay);
  TANDEM_CHECK(!options.nesterov || (options.momentum > 0.0 && options.dampening == 0.0),
               "optim::SGD: nesterov momentum needs momentum > 0 and dampening == 0, got momentum ",
               options.momentum, " and dampening ", options.dampening);
}

}  // namespace

SGD::SGD(std::vector<Tensor> parameters, SGDOptions options)
    : Optimizer(std::move(parameters), "optim::SGD"), momentum_buffers_(this->parameters().size()), options_(options) {
  check_options(options_);
}

void SGD::set_lr(double lr) {
  TANDEM_CHECK(lr >= 0.0, "optim::SGD::set_lr: lr must be >= 0, got ", lr);
  options_.lr = lr;
}

void SGD::step() {
  NoGradGuard no_grad;
  SgdUpdate update;
  update.lr = static_cast<float>(options_.lr);
  update.momentum = static_cast<float>(options_.momentum);
  update.dampening = static_cast<float>(options_.dampening);
  update.weight_decay = static_cast<float>(options_.weight_decay);
  update.nesterov = options_.nesterov;
  for (size_t i = 0; i < parameters().size(); ++i) {
    const Tensor& parameter = parameters()[i];
    Tensor grad = parameter.grad();
    if (!grad.defined()) continue;
    Tensor& buffer = momentum_buffers_[i];
    update.first_step = !buffer.defined();
    // The first step writes buf = d, so the new buffer needs no initial values.
    if (options_.momentum != 0.0 && update.first_step) buffer = Tensor::empty(parameter.shape(), parameter.device());
    sgd_update(parameter, grad.contiguous(), buffer, update);
  }
}

void SGD::set_momentum_buffers(const std::vector<Tensor>& buffers) {
  TANDEM_CHECK(buffers.size() == parameters().size(), "optim::SGD::set_momentum_buffers: got ", buffers.size(),
               " buffers for ", parameters().size(), " parameters");
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (!buffers[i].defined()) continue;
    TANDEM_CHECK(buffers[i].shape() == parameters()[i].shape(), "optim::SGD::set_momentum_buffers: buffer ", i,
                 " has shape ", to_string(buffers[i].shape()), " but parameter ", i, " has shape ",
                 to_string(parameters()[i].shape()));
  }
  NoGradGuard no_grad;
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (!buffers[i].defined()) {
      momentum_buffers_[i] = Tensor();
      continue;
    }
    Tensor buffer = Tensor::empty(parameters()[i].shape(), parameters()[i].device());
    buffer.copy_(buffers[i]);
    momentum_buffers_[i] = buffer;
  }
}

}  // namespace tandem::optim
