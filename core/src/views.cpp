// Views (sharing storage) and copies between devices, with their gradients.
#include <algorithm>
#include <optional>

#include "raw_ops.h"
#include "tandem/core/autograd.h"
#include "tandem/core/error.h"
#include "tandem/core/tensor.h"

namespace tandem {

using autograd::apply_one;
using autograd::Function;

namespace {

// A view with new geometry over the input's storage; backward maps the gradient back through `inverse`.
template <typename Forward, typename Backward>
class ViewFunction final : public Function {
 public:
  ViewFunction(const char* name, Forward forward, Backward backward)
      : name_(name), forward_(std::move(forward)), backward_(std::move(backward)) {}
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    input_shape_ = in[0].shape();
    return {forward_(in[0])};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    return {backward_(grads[0], input_shape_)};
  }
  std::string name() const override { return name_; }

 private:
  const char* name_;
  Forward forward_;
  Backward backward_;
  Shape input_shape_;
};

template <typename Forward, typename Backward>
Tensor apply_view(const char* name, const Tensor& input, Forward forward, Backward backward) {
  return apply_one(std::make_shared<ViewFunction<Forward, Backward>>(name, std::move(forward), std::move(backward)),
                   {input});
}

Shape infer_shape(const Shape& requested, int64_t numel, const char* caller) {
  Shape shape = requested;
  int64_t inferred = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] != -1) continue;
    TANDEM_CHECK(inferred < 0, caller, ": only one dimension can be -1, got ", to_string(requested));
    inferred = static_cast<int64_t>(i);
    shape[i] = 1;
  }
  const int64_t known = checked_numel(shape, caller);
  if (inferred >= 0) {
    TANDEM_CHECK(known != 0 && numel % known == 0, caller, ": shape ", to_string(requested),
                 " is invalid for a tensor of ", numel, " elements");
    shape[inferred] = numel / known;
  }
  TANDEM_CHECK(numel_of(shape) == numel, caller, ": shape ", to_string(requested), " is invalid for a tensor of ",
               numel, " elements");
  return shape;
}

// The gradient g of a view or reshape, in the input's shape: a view of g where its strides allow one (a gradient that
// arrives as the transpose of heads laid out as [B, T, H, E] goes back to [B, T, H E] without a copy), else a
// contiguous copy.
Tensor reshaped_gradient(const Tensor& g, const Shape& input_shape) {
  if (const std::optional<Shape> strides = view_strides(g.shape(), g.strides(), input_shape)) {
    return raw::alias(g, input_shape, *strides, g.storage_offset());
  }
  const Tensor c = raw::contiguous(g);
  return raw::alias(c, input_shape, contiguous_strides(input_shape), c.storage_offset());
}

// The view of t that keeps `length` elements of dim `dim` from `start` (narrow's and split's parts, and the slices
// their gradients are written into).
Tensor slice(const Tensor& t, int64_t dim, int64_t start, int64_t length) {
  Shape shape = t.shape();
  shape[dim] = length;
  return raw::alias(t, shape, t.strides(), t.storage_offset() + start * t.strides()[dim]);
}

}  // namespace

Tensor Tensor::to(Device device) const {
  check_defined("to");
  if (device == this->device()) return *this;
  check_device_available(device, "Tensor::to");
  const Device source = this->device();
  return apply_view(
      "ToBackward", *this, [device](const Tensor& x) { return raw::to_device(x, device); },
      [source](const Tensor& g, const Shape&) { return raw::to_device(g, source); });
}

Tensor Tensor::to(Device device, bool non_blocking) const {
  check_defined("to");
  const bool asynchronous = non_blocking && device.is_cuda() && is_pinned() && is_contiguous();
  if (!asynchronous) return to(device);
  check_device_available(device, "Tensor::to");
  const Device source = this->device();
  return apply_view(
      "ToBackward", *this, [device](const Tensor& x) { return raw::to_device_from_pinned(x, device); },
      [source](const Tensor& g, const Shape&) { return raw::to_device(g, source); });
}

Tensor Tensor::pin_memory() const {
  check_defined("pin_memory");
  TANDEM_CHECK(device().is_cpu(), "Tensor::pin_memory: the tensor is on ", device(),
               " but expected a CPU tensor (only host memory is pinned)");
  if (is_pinned()) return *this;
  return apply_view(
      "PinMemoryBackward", *this, [](const Tensor& x) { return raw::pinned_copy(x, "Tensor::pin_memory"); },
      [](const Tensor& g, const Shape&) { return g; });
}

Tensor Tensor::to(DType dtype) const {
  check_defined("to");
  const DType source = this->dtype();
  if (dtype == source) return *this;
  // Only floating point dtypes carry gradients: a conversion from or to int64 records nothing.
  if (!is_floating_point(dtype) || !is_floating_point(source)) return raw::convert(*this, dtype);
  return apply_view(
      "ToDTypeBackward", *this, [dtype](const Tensor& x) { return raw::convert(x, dtype); },
      [source](const Tensor& g, const Shape&) { return raw::convert(g, source); });
}

Tensor Tensor::clone() const {
  check_defined("clone");
  return apply_view(
      "CloneBackward", *this, [](const Tensor& x) { return raw::to_device(x, x.device()); },
      [](const Tensor& g, const Shape&) { return g; });
}

Tensor Tensor::contiguous() const { return is_contiguous() ? *this : clone(); }

Tensor Tensor::view(const Shape& shape) const {
  check_defined("view");
  const Shape target = infer_shape(shape, numel(), "Tensor::view");
  TANDEM_CHECK(is_contiguous(), "Tensor::view: the tensor (shape ", to_string(this->shape()), ", strides ",
               to_string(strides()), ") is not contiguous; use reshape()");
  return apply_view(
      "ViewBackward", *this,
      [target](const Tensor& x) { return raw::alias(x, target, contiguous_strides(target), x.storage_offset()); },
      [](const Tensor& g, const Shape& input_shape) { return reshaped_gradient(g, input_shape); });
}

// A view when the strides allow one (Note [Views of other shapes] in shape.h), else a copy, as PyTorch's reshape.
Tensor Tensor::reshape(const Shape& shape) const {
  check_defined("reshape");
  const Shape target = infer_shape(shape, numel(), "Tensor::reshape");
  if (is_contiguous()) return view(target);
  const std::optional<Shape> strides = view_strides(this->shape(), this->strides(), target);
  if (!strides) return contiguous().view(target);
  return apply_view(
      "ReshapeBackward", *this,
      [target, strides = *strides](const Tensor& x) { return raw::alias(x, target, strides, x.storage_offset()); },
      [](const Tensor& g, const Shape& input_shape) { return reshaped_gradient(g, input_shape); });
}

Tensor Tensor::narrow(int64_t dim, int64_t start, int64_t length) const {
  check_defined("narrow");
  const int64_t d = wrap_dim(dim, this->dim(), "Tensor::narrow");
  const int64_t size = shape()[d];
  TANDEM_CHECK(start >= 0 && length >= 0 && start <= size && length <= size - start, "Tensor::narrow: start ", start,
               " and length ", length, " are out of bounds for dimension ", d, " of size ", size);
  return apply_view(
      "NarrowBackward", *this,
      [d, start, length](const Tensor& x) { return slice(x, d, start, length); },
      [d, start, length](const Tensor& g, const Shape& input_shape) {
        Tensor full = Tensor::zeros(input_shape, g.dtype(), g.device());
        raw::copy(g, slice(full, d, start, length));
        return full;
      });
}

namespace {

// Note [Split gradients]: the parts of split() (and chunk()) are the outputs of one node, so its backward writes
// every part's gradient into its own slice of one new tensor. Parts taken by narrow() one by one would each scatter
// their gradient into a zero tensor of the input's size, and the engine would then sum those full-size tensors: for
// the query, key and value of a packed [B, T, 3C] projection, three fills and two additions of the whole gradient
// that this node never makes.
class SplitFunction final : public Function {
 public:
  SplitFunction(int64_t dim, std::vector<int64_t> sizes) : dim_(dim), sizes_(std::move(sizes)) {}
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    input_shape_ = in[0].shape();
    std::vector<Tensor> parts;
    int64_t start = 0;
    for (const int64_t size : sizes_) {
      parts.push_back(slice(in[0], dim_, start, size));
      start += size;
    }
    return parts;
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    if (std::optional<Tensor> joined = joined_parts(grads)) return {*joined};
    const Tensor full = raw::allocate(input_shape_, grads[0].dtype(), grads[0].device(), false, "Tensor::split");
    int64_t start = 0;
    for (size_t i = 0; i < sizes_.size(); ++i) {
      raw::copy(grads[i], slice(full, dim_, start, sizes_[i]));
      start += sizes_[i];
    }
    return {full};
  }
  std::string name() const override { return "SplitBackward"; }

 private:
  // The parts' gradients as one tensor of the input's shape when they already are its slices: views of one storage
  // with one set of strides, part i where the input's view of it would start. An op that wrote the gradients of
  // several parts into one tensor (fused attention: Note [Gradients of packed heads] in ops/attention_ops.cpp) so
  // costs no copy here.
  std::optional<Tensor> joined_parts(const std::vector<Tensor>& grads) const {
    const Tensor& first = grads[0];
    int64_t start = 0;
    for (size_t i = 0; i < sizes_.size(); ++i) {
      const Tensor& part = grads[i];
      if (!part.shares_storage_with(first) || part.dtype() != first.dtype() || part.strides() != first.strides() ||
          part.storage_offset() != first.storage_offset() + start * first.strides()[dim_]) {
        return std::nullopt;
      }
      start += sizes_[i];
    }
    return raw::alias(first, input_shape_, first.strides(), first.storage_offset());
  }

  int64_t dim_;
  std::vector<int64_t> sizes_;
  Shape input_shape_;
};

}  // namespace

std::vector<Tensor> Tensor::split(const std::vector<int64_t>& sizes, int64_t dim) const {
  check_defined("split");
  const int64_t d = wrap_dim(dim, this->dim(), "Tensor::split");
  const int64_t total = checked_sum(sizes, "Tensor::split", "sizes");
  TANDEM_CHECK(total == shape()[d], "Tensor::split: sizes sum to ", total, " but dimension ", d, " has size ",
               shape()[d]);
  if (sizes.empty()) return {};
  return autograd::apply(std::make_shared<SplitFunction>(d, sizes), {*this});
}

std::vector<Tensor> Tensor::chunk(int64_t chunks, int64_t dim) const {
  check_defined("chunk");
  TANDEM_CHECK(chunks > 0, "Tensor::chunk: chunks must be positive, got ", chunks);
  const int64_t d = wrap_dim(dim, this->dim(), "Tensor::chunk");
  const int64_t size = shape()[d];
  if (size == 0) return split(std::vector<int64_t>(static_cast<size_t>(chunks), 0), d);
  const int64_t chunk_size = size / chunks + (size % chunks != 0);
  std::vector<int64_t> sizes;
  for (int64_t start = 0; start < size; start += chunk_size) sizes.push_back(std::min(chunk_size, size - start));
  return split(sizes, d);
}

Tensor Tensor::t() const {
  check_defined("t");
  TANDEM_CHECK(dim() == 2, "Tensor::t: expected a 2-D tensor, got shape ", to_string(shape()));
  return transpose(0, 1);
}

namespace {

// x's dims reordered: result dim i is x's dim order[i].
Tensor permuted(const Tensor& x, const Shape& order) {
  Shape shape(order.size()), strides(order.size());
  for (size_t i = 0; i < order.size(); ++i) {
    shape[i] = x.shape()[order[i]];
    strides[i] = x.strides()[order[i]];
  }
  return raw::alias(x, shape, strides, x.storage_offset());
}

// x with a size-1 dim inserted at `dim` (already wrapped), strided as if it had always been there.
Tensor unsqueezed(const Tensor& x, int64_t dim) {
  Shape shape = x.shape(), strides = x.strides();
  const int64_t stride = dim < x.dim() ? shape[dim] * strides[dim] : 1;
  shape.insert(shape.begin() + dim, 1);
  strides.insert(strides.begin() + dim, stride);
  return raw::alias(x, shape, strides, x.storage_offset());
}

// x without its size-1 dim `dim` (already wrapped).
Tensor squeezed(const Tensor& x, int64_t dim) {
  Shape shape = x.shape(), strides = x.strides();
  shape.erase(shape.begin() + dim);
  strides.erase(strides.begin() + dim);
  return raw::alias(x, shape, strides, x.storage_offset());
}

}  // namespace

Tensor Tensor::transpose(int64_t dim0, int64_t dim1) const {
  check_defined("transpose");
  Shape order(static_cast<size_t>(std::max<int64_t>(dim(), 0)));
  for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int64_t>(i);
  if (dim() == 0) {
    // As PyTorch: a 0-D tensor transposes with dims 0 and -1 to itself.
    TANDEM_CHECK((dim0 == 0 || dim0 == -1) && (dim1 == 0 || dim1 == -1), "Tensor::transpose: dimensions ", dim0,
                 " and ", dim1, " are out of range for a 0-dim tensor");
    return *this;
  }
  std::swap(order[wrap_dim(dim0, dim(), "Tensor::transpose")], order[wrap_dim(dim1, dim(), "Tensor::transpose")]);
  return apply_view(
      "TransposeBackward", *this, [order](const Tensor& x) { return permuted(x, order); },
      [order](const Tensor& g, const Shape&) { return permuted(g, order); });
}

Tensor Tensor::permute(const Shape& dims) const {
  check_defined("permute");
  TANDEM_CHECK(static_cast<int64_t>(dims.size()) == dim(), "Tensor::permute: ", dims.size(),
               " dimensions given (", to_string(dims), ") but the tensor has ", dim(), " (shape ", to_string(shape()),
               ")");
  Shape order(dims.size()), inverse(dims.size(), -1);
  for (size_t i = 0; i < dims.size(); ++i) {
    order[i] = wrap_dim(dims[i], dim(), "Tensor::permute");
    TANDEM_CHECK(inverse[order[i]] < 0, "Tensor::permute: dimension ", order[i], " appears twice in ",
                 to_string(dims));
    inverse[order[i]] = static_cast<int64_t>(i);
  }
  return apply_view(
      "PermuteBackward", *this, [order](const Tensor& x) { return permuted(x, order); },
      [inverse](const Tensor& g, const Shape&) { return permuted(g, inverse); });
}

Tensor Tensor::unsqueeze(int64_t dim) const {
  check_defined("unsqueeze");
  const int64_t d = wrap_dim(dim, this->dim() + 1, "Tensor::unsqueeze");
  return apply_view(
      "UnsqueezeBackward", *this, [d](const Tensor& x) { return unsqueezed(x, d); },
      [d](const Tensor& g, const Shape&) { return squeezed(g, d); });
}

Tensor Tensor::squeeze(int64_t dim) const {
  check_defined("squeeze");
  if (this->dim() == 0) {
    TANDEM_CHECK(dim == 0 || dim == -1, "Tensor::squeeze: dimension ", dim, " is out of range for a 0-dim tensor");
    return *this;
  }
  const int64_t d = wrap_dim(dim, this->dim(), "Tensor::squeeze");
  if (shape()[d] != 1) return *this;
  return apply_view(
      "SqueezeBackward", *this, [d](const Tensor& x) { return squeezed(x, d); },
      [d](const Tensor& g, const Shape&) { return unsqueezed(g, d); });
}

Tensor Tensor::squeeze() const {
  check_defined("squeeze");
  Tensor result = *this;
  for (int64_t d = dim(); d-- > 0;) result = result.squeeze(d);
  return result;
}

Tensor Tensor::flatten(int64_t start_dim, int64_t end_dim) const {
  check_defined("flatten");
  if (dim() == 0) return reshape({1});
  const int64_t start = wrap_dim(start_dim, dim(), "Tensor::flatten");
  const int64_t end = wrap_dim(end_dim, dim(), "Tensor::flatten");
  TANDEM_CHECK(start <= end, "Tensor::flatten: start_dim ", start_dim, " comes after end_dim ", end_dim,
               " (shape ", to_string(shape()), ")");
  Shape target(shape().begin(), shape().begin() + start);
  target.push_back(numel_of(Shape(shape().begin() + start, shape().begin() + end + 1)));
  target.insert(target.end(), shape().begin() + end + 1, shape().end());
  return reshape(target);
}

Tensor Tensor::expand(const Shape& shape) const {
  check_defined("expand");
  return apply_view(
      "ExpandBackward", *this, [shape](const Tensor& x) { return raw::expand(x, shape, "Tensor::expand"); },
      [](const Tensor& g, const Shape& input_shape) { return raw::sum_to(g, input_shape); });
}

Tensor Tensor::sum_to(const Shape& shape) const {
  check_defined("sum_to");
  return apply_view(
      "SumToBackward", *this, [shape](const Tensor& x) { return raw::sum_to(x, shape); },
      [](const Tensor& g, const Shape& input_shape) { return raw::expand(g, input_shape, "Tensor::sum_to"); });
}

}  // namespace tandem
