#pragma once
// A small optimizer that is not SGD, for the tests that plug an optimizer in: v = decay * v + grad,
// param -= lr * v, with v (one tensor per parameter, undefined until its first gradient) as its state.

#include <tandem/tandem.h>

#include <string>
#include <utility>
#include <vector>

namespace tandem::testing {

class VelocityOptimizer : public optim::Optimizer {
 public:
  VelocityOptimizer(std::vector<Tensor> parameters, float lr, float decay)
      : Optimizer(std::move(parameters), "VelocityOptimizer"),
        lr_(lr),
        decay_(decay),
        velocity_(this->parameters().size()) {}

  void step() override {
    NoGradGuard no_grad;
    for (size_t i = 0; i < parameters().size(); ++i) {
      const Tensor grad = parameters()[i].grad();
      if (!grad.defined()) continue;
      if (velocity_[i].defined()) {
        velocity_[i].mul_(decay_).add_(grad);
      } else {
        velocity_[i] = grad.clone();
      }
      Tensor(parameters()[i]).add_(velocity_[i], -lr_);
    }
  }
  std::vector<Tensor> state() const override { return velocity_; }
  void set_state(const std::vector<Tensor>& state) override {
    TANDEM_CHECK(state.size() == velocity_.size(), "VelocityOptimizer::set_state: got ", state.size(), " tensors");
    NoGradGuard no_grad;
    for (size_t i = 0; i < state.size(); ++i)
      velocity_[i] = state[i].defined() ? state[i].to(parameters()[i].device()).clone() : Tensor();
  }

 private:
  float lr_;
  float decay_;
  std::vector<Tensor> velocity_;
};

}  // namespace tandem::testing
