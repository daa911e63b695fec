// Indexing along a dimension (index_select, gather), one_hot and stack. Indices are float32 tensors holding
// integers, checked on the host before any kernel reads them.
#include <algorithm>
#include <cmath>

#include "ops/raw_kernels.h"
#include "tandem/core/autograd.h"
#include "tandem/core/error.h"
#include "tandem/core/ops.h"

namespace tandem {

using autograd::Function;

namespace {

// out = x gathered along dim at `index` (index already has out's shape, possibly as a broadcast view); the
// gradient scatter-adds back into x's shape.
class Gather final : public Function {
 public:
  Gather(int64_t dim, Tensor index) : dim_(dim), index_(std::move(index)) {}
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    shape_ = in[0].shape();
    return {raw::gather(in[0], dim_, index_)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    return {raw::scatter_add(raw::contiguous(grads[0]), dim_, index_, shape_, grads[0].device())};
  }
  std::string name() const override { return "GatherBackward"; }

 private:
  int64_t dim_;
  Tensor index_;  // never requires grad: an input of the op, not of the graph
  Shape shape_;
};

void check_index_tensor(const char* caller, const Tensor& x, const Tensor& index) {
  raw::check_defined(caller, x);
  raw::check_defined(caller, index, "index");
  raw::check_same_device(caller, x, index);
}

}  // namespace

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  check_index_tensor("index_select", x, index);
  TANDEM_CHECK(index.dim() <= 1, "index_select: index has shape ", to_string(index.shape()),
               " but expected 0 or 1 dimensions");
  const int64_t d = wrap_dim(dim, x.dim(), "index_select");
  raw::check_indices("index_select", index, x.size(d), d);
  // The 1-D index seen as a broadcast over x's shape (with index's length at dim), which gather reads.
  Shape shape = x.shape();
  shape[d] = index.numel();
  Shape strides(shape.size(), 0);
  strides[d] = index.dim() == 0 ? 0 : index.strides()[0];
  const Tensor spread = raw::alias(index, shape, strides, index.storage_offset());
  return autograd::apply(std::make_shared<Gather>(d, spread), {x})[0];
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  check_index_tensor("gather", x, index);
  const int64_t d = wrap_dim(dim, x.dim(), "gather");
  TANDEM_CHECK(index.dim() == x.dim(), "gather: index has ", index.dim(), " dimensions but input has ", x.dim());
  for (int64_t i = 0; i < x.dim(); ++i)
    TANDEM_CHECK(i == d || index.size(i) <= x.size(i), "gather: index has shape ", to_string(index.shape()),
                 " but input has shape ", to_string(x.shape()), " (size ", index.size(i), " > ", x.size(i),
                 " at dimension ", i, ")");
  raw::check_indices("gather", index, x.size(d), d);
  return autograd::apply(std::make_shared<Gather>(d, index.detach()), {x})[0];
}

Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  raw::check_defined("one_hot", indices, "indices");
  TANDEM_CHECK(num_classes >= -1, "one_hot: num_classes is ", num_classes, " but expected -1 or a count >= 0");
  const std::vector<float> values = indices.to_vector();
  if (num_classes == -1) {
    TANDEM_CHECK(!values.empty(), "one_hot: cannot infer num_classes from empty indices (pass num_classes)");
    float largest = 0.0f;
    for (float v : values) largest = std::max(largest, v);  // NaN and non-integers are refused below
    TANDEM_CHECK(largest < 16777216.0f, "one_hot: index ", largest, " is too large (expected < 2^24)");
    num_classes = static_cast<int64_t>(largest) + 1;
  }
  raw::check_indices("one_hot", indices, num_classes, -1);
  std::vector<float> classes(static_cast<size_t>(num_classes));
  for (int64_t c = 0; c < num_classes; ++c) classes[c] = static_cast<float>(c);
  Shape column = indices.shape();
  column.push_back(1);
  const Tensor labels = raw::reshaped(raw::contiguous(indices.detach()), column);
  return eq(labels, Tensor::from_vector(classes, {num_classes}, indices.device()));
}

Tensor stack(const std::vector<Tensor>& tensors, int64_t dim) {
  TANDEM_CHECK(!tensors.empty(), "stack: expected a non-empty list of tensors");
  for (const Tensor& t : tensors) raw::check_defined("stack", t, "a tensor in the list");
  const Shape& shape = tensors[0].shape();
  const int64_t d = wrap_dim(dim, static_cast<int64_t>(shape.size()) + 1, "stack");
  for (size_t i = 1; i < tensors.size(); ++i)
    TANDEM_CHECK(tensors[i].shape() == shape, "stack: tensor ", i, " has shape ", to_string(tensors[i].shape()),
                 " but expected ", to_string(shape), " (the shape of tensor 0)");
  Shape unsqueezed = shape;
  unsqueezed.insert(unsqueezed.begin() + d, 1);
  std::vector<Tensor> pieces;
  for (const Tensor& t : tensors) pieces.push_back(t.reshape(unsqueezed));
  return cat(pieces, d);
}

}  // namespace tandem
