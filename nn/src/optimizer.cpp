#include "tandem/optim/optimizer.h"

#include "tandem/core/autograd.h"
#include "tandem/core/error.h"

namespace tandem::optim {

Optimizer::Optimizer(std::vector<Tensor> parameters, const char* who) : parameters_(std::move(parameters)) {
  TANDEM_CHECK(!parameters_.empty(), who, ": got an empty parameter list");
  for (size_t i = 0; i < parameters_.size(); ++i) {
    const Tensor& parameter = parameters_[i];
    TANDEM_CHECK(parameter.defined(), who, ": parameter ", i, " is undefined");
    TANDEM_CHECK(parameter.is_leaf(), who, ": parameter ", i,
                 " is the result of an operation; only leaf tensors can be optimized");
    for (size_t j = 0; j < i; ++j)
      TANDEM_CHECK(!parameters_[j].is_same(parameter), who, ": parameters ", j, " and ", i, " are the same tensor");
  }
}

void Optimizer::zero_grad(bool set_to_none) { autograd::zero_grad(parameters_, set_to_none); }

}  // namespace tandem::optim
