// The two forms of Module's forward and the calls built on them (Note [Two forms of forward] in module.h).

#include <utility>

#include "tandem/nn/module.h"

namespace tandem::nn {
namespace {

// Note [Default forward guard]: the default forward(input) calls forward_all({input}), and the default forward_all
// calls forward(inputs[0]), so a module that overrides neither would recurse until the stack overflows. The default
// forward marks its module on this thread for as long as it runs; the default forward_all, reached with its module
// marked, knows that it was called (directly or through an override that delegates back) from that module's own
// default forward with nothing overridden in between to do the work, and throws. The mark is per thread, because
// replicas run on worker threads, and the previous mark is restored on the way out, so nested modules keep theirs.
thread_local const Module* module_in_default_forward = nullptr;

class DefaultForwardMark {
 public:
  explicit DefaultForwardMark(const Module* module) : previous_(std::exchange(module_in_default_forward, module)) {}
  ~DefaultForwardMark() { module_in_default_forward = previous_; }
  DefaultForwardMark(const DefaultForwardMark&) = delete;
  DefaultForwardMark& operator=(const DefaultForwardMark&) = delete;

 private:
  const Module* previous_;
};

}  // namespace

Tensor detail::single_output(const Module& module, std::vector<Tensor>&& outputs, const char* caller) {
  TANDEM_CHECK(outputs.size() == 1, caller, ": ", module.name(), " returned ", outputs.size(),
               " outputs but one was expected");
  return std::move(outputs.front());
}

Tensor Module::forward(const Tensor& input) {
  DefaultForwardMark mark(this);
  return detail::single_output(*this, forward_all({input}), "nn::Module::forward");
}

std::vector<Tensor> Module::forward_all(const std::vector<Tensor>& inputs) {
  TANDEM_CHECK(module_in_default_forward != this, "nn::Module::forward_all: ", name(),
               " overrides neither forward(const Tensor&) nor forward_all(const std::vector<Tensor>&); a module "
               "must override one of them");
  check_input_count(inputs, 1);
  return {forward(inputs.front())};
}

void Module::check_input_count(const std::vector<Tensor>& inputs, size_t expected) const {
  TANDEM_CHECK(inputs.size() == expected, "nn::Module::forward_all: ", name(), " takes ", expected,
               expected == 1 ? " input" : " inputs", " but got ", inputs.size());
}

}  // namespace tandem::nn
