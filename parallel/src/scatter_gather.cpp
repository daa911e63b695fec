#include "tandem/parallel/scatter_gather.h"

#include <memory>

#include "tandem/core/autograd.h"
#include "tandem/core/error.h"
#include "tandem/parallel/functions.h"

namespace tandem::parallel {

std::vector<Tensor> scatter(const Tensor& input, const std::vector<Device>& devices,
                            const std::vector<int64_t>& chunk_sizes, int64_t dim) {
  TANDEM_CHECK(input.defined(), "parallel::scatter: input is undefined");
  return autograd::apply(std::make_shared<Scatter>(devices, chunk_sizes, dim), {input});
}

Tensor gather(const std::vector<Tensor>& outputs, Device destination, int64_t dim) {
  for (size_t i = 0; i < outputs.size(); ++i)
    TANDEM_CHECK(outputs[i].defined(), "parallel::gather: tensor ", i, " is undefined");
  return autograd::apply(std::make_shared<Gather>(destination, dim), outputs).front();
}

}  // namespace tandem::parallel
