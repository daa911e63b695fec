#include "tandem/trainers/dataset.h"

#include "tandem/core/error.h"
#include "tandem/core/grad_mode.h"
#include "tandem/core/ops.h"

namespace tandem::trainers {
namespace {

// The tensors `part` (data or target) of every example, checked to be defined and alike.
std::vector<Tensor> parts_of(const std::vector<Example>& examples, Tensor Example::*part, const char* what) {
  std::vector<Tensor> parts;
  parts.reserve(examples.size());
  const Tensor& first = examples.front().*part;
  for (size_t i = 0; i < examples.size(); ++i) {
    const Tensor& tensor = examples[i].*part;
    TANDEM_CHECK(tensor.defined(), "Dataset::collate: the ", what, " of example ", i, " is undefined");
    TANDEM_CHECK(first.defined() && tensor.shape() == first.shape() && tensor.dtype() == first.dtype(),
                 "Dataset::collate: the ", what, " of example ", i, " has shape ", to_string(tensor.shape()),
                 " and dtype ", tensor.dtype(), " but example 0's has ", to_string(first.shape()), " and ",
                 first.dtype(), "; expected the same");
    parts.push_back(tensor);
  }
  return parts;
}

}  // namespace

Example Dataset::collate(const std::vector<Example>& examples) const {
  TANDEM_CHECK(!examples.empty(), "Dataset::collate: got no examples but expected at least one");
  NoGradGuard no_grad;
  return {stack(parts_of(examples, &Example::data, "data")), stack(parts_of(examples, &Example::target, "target"))};
}

Example Dataset::get_batch(const std::vector<int64_t>& indices) const {
  TANDEM_CHECK(!indices.empty(), "Dataset::get_batch: got no indices but expected at least one");
  std::vector<Example> examples;
  examples.reserve(indices.size());
  for (const int64_t index : indices) examples.push_back(get(index));
  return collate(examples);
}

}  // namespace tandem::trainers
