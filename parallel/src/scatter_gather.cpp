#include "tandem/parallel/scatter_gather.h"

#include <memory>

#include "scatter_each.h"
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

namespace detail {

std::vector<std::vector<Tensor>> scatter_each(const std::vector<Tensor>& inputs, const std::vector<Device>& devices,
                                              int64_t dim, const char* fn) {
  std::vector<std::vector<Tensor>> chunks;
  for (size_t j = 0; j < inputs.size(); ++j) {
    std::vector<Tensor> input_chunks = parallel::scatter(inputs[j], devices, {}, dim);  // checks dim first
    TANDEM_CHECK(inputs[j].size(dim) == inputs[0].size(dim), fn, ": input ", j, " has size ", inputs[j].size(dim),
                 " along dim ", dim, " but input 0 has size ", inputs[0].size(dim),
                 "; every input is split the same way, so their sizes along dim must be equal");
    chunks.resize(input_chunks.size());
    for (size_t i = 0; i < input_chunks.size(); ++i) chunks[i].push_back(std::move(input_chunks[i]));
  }
  return chunks;
}

std::vector<Tensor> gather_each(const std::vector<std::vector<Tensor>>& replica_outputs, Device destination,
                                int64_t dim, const char* fn) {
  const size_t count = replica_outputs.front().size();
  for (size_t i = 1; i < replica_outputs.size(); ++i)
    TANDEM_CHECK(replica_outputs[i].size() == count, fn, ": replica ", i, " returned ", replica_outputs[i].size(),
                 " outputs but replica 0 returned ", count);
  std::vector<Tensor> outputs;
  outputs.reserve(count);
  for (size_t k = 0; k < count; ++k) {
    std::vector<Tensor> pieces;
    pieces.reserve(replica_outputs.size());
    for (const std::vector<Tensor>& replica : replica_outputs) pieces.push_back(replica[k]);
    outputs.push_back(parallel::gather(pieces, destination, dim));
  }
  return outputs;
}

}  // namespace detail

}  // namespace tandem::parallel
