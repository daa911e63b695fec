// Indexing along a dimension (index_select, gather, scatter_add), one_hot and stack. Indices are int64 tensors,
// checked on the host before any kernel reads them (Note [Index checks] in ops/raw_kernels.h).
#include <algorithm>
#include <limits>

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
    return {raw::scatter_add(grads[0], dim_, index_, shape_, grads[0].device())};
  }
  std::string name() const override { return "GatherBackward"; }

 private:
  int64_t dim_;
  Tensor index_;  // never requires grad: an input of the op, not of the graph
  Shape shape_;
};

// out = x with src's values at the positions of index's shape added along dim at `index`; the gradient of x is the
// incoming one, that of src the incoming one gathered at `index` (0 where src reaches beyond index's shape).
class ScatterAdd final : public Function {
 public:
  ScatterAdd(int64_t dim, Tensor index) : dim_(dim), index_(std::move(index)) {}
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    const Tensor& x = in[0];
    const Tensor& src = in[1];
    src_shape_ = src.shape();
    Tensor out = empty_like(x);
    raw::copy(x, out);
    raw::scatter_add_into(out, dim_, index_, raw::alias(src, index_.shape(), src.strides(), src.storage_offset()));
    return {out};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    const Tensor& grad = grads[0];
    Tensor grad_src;
    if (needs_input_grad(1)) grad_src = gathered_into_src_shape(grad);
    return {needs_input_grad(0) ? grad : Tensor(), grad_src};
  }
  std::string name() const override { return "ScatterAddBackward"; }

 private:
  Tensor gathered_into_src_shape(const Tensor& grad) const {
    Tensor gathered = raw::gather(grad, dim_, index_);
    if (gathered.shape() == src_shape_) return gathered;
    Tensor grad_src = Tensor::zeros(src_shape_, grad.device());
    raw::copy(gathered, raw::alias(grad_src, index_.shape(), grad_src.strides(), 0));
    return grad_src;
  }

  int64_t dim_;
  Tensor index_;  // never requires grad: an input of the op, not of the graph
  Shape src_shape_;
};

void check_index_tensor(const char* caller, const Tensor& x, const Tensor& index) {
  raw::check_defined(caller, x);
  raw::check_defined(caller, index, "index");
  raw::check_float32(caller, {x});
  raw::check_same_device(caller, x, index);
}

// Throws unless index has t's number of dimensions and at most t's size in each of them but `free_dim` (-1: none).
void check_index_shape(const char* caller, const Tensor& index, const Tensor& t, const char* what, int64_t free_dim) {
  TANDEM_CHECK(index.dim() == t.dim(), caller, ": index has ", index.dim(), " dimensions but ", what, " has ", t.dim());
  for (int64_t i = 0; i < t.dim(); ++i)
    TANDEM_CHECK(i == free_dim || index.size(i) <= t.size(i), caller, ": index has shape ", to_string(index.shape()),
                 " but ", what, " has shape ", to_string(t.shape()), " (size ", index.size(i), " > ", t.size(i),
                 " at dimension ", i, ")");
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
  check_index_shape("gather", index, x, "input", d);
  raw::check_indices("gather", index, x.size(d), d);
  return autograd::apply(std::make_shared<Gather>(d, index.detach()), {x})[0];
}

Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src) {
  check_index_tensor("scatter_add", x, index);
  raw::check_defined("scatter_add", src, "src");
  raw::check_float32("scatter_add", {x, src});
  raw::check_same_device("scatter_add", x, src);
  const int64_t d = wrap_dim(dim, x.dim(), "scatter_add");
  check_index_shape("scatter_add", index, x, "input", d);
  check_index_shape("scatter_add", index, src, "src", -1);
  raw::check_indices("scatter_add", index, x.size(d), d);
  return autograd::apply(std::make_shared<ScatterAdd>(d, index.detach()), {x, src})[0];
}

void check_indices_on_device(const Tensor& index, int64_t limit, std::optional<int64_t> allowed, const char* caller) {
  raw::check_defined(caller, index, "index");
  raw::check_index_dtype(caller, index);
  TANDEM_CHECK(index.device().is_cuda(), caller, ": index is on ", index.device(),
               " but a check on the device needs a GPU (the index ops check CPU tensors on the host)");
  backend::cuda_check_indices_on_device(caller, index, limit, -1, allowed);
}

Tensor one_hot(const Tensor& indices, int64_t num_classes) {
  raw::check_defined("one_hot", indices, "indices");
  TANDEM_CHECK(num_classes >= -1, "one_hot: num_classes is ", num_classes, " but expected -1 or a count >= 0");
  const std::vector<int64_t> values = raw::index_values("one_hot", indices);
  if (num_classes == -1) {
    TANDEM_CHECK(!values.empty(), "one_hot: cannot infer num_classes from empty indices (pass num_classes)");
    const int64_t largest = *std::max_element(values.begin(), values.end());  // negatives are refused below
    TANDEM_CHECK(largest < std::numeric_limits<int64_t>::max(), "one_hot: index ", largest, " is too large");
    num_classes = largest + 1;
  }
  raw::check_index_range("one_hot", values, num_classes, -1);
  // A 1 scatter-added at each index along a new last dimension, then converted to int64, all on the device.
  Shape column = indices.shape();
  column.push_back(1);
  Shape shape = indices.shape();
  shape.push_back(num_classes);
  const Tensor index = raw::reshaped(raw::contiguous(indices.detach()), column);
  const Tensor ones = raw::expand(Tensor::ones({}, indices.device()), column, "one_hot");
  return raw::convert(raw::scatter_add(ones, indices.dim(), index, shape, indices.device()), DType::Int64);
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
