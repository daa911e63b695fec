// Checks, shapes and allocation around the backends' general kernels (see raw_kernels.h).
#include "ops/raw_kernels.h"

#include <algorithm>

#include "tandem/core/device_graph.h"
#include "tandem/core/error.h"

namespace tandem::raw {

std::vector<int64_t> reduction_dims(const std::vector<int64_t>& dims, int64_t ndim, const char* caller) {
  std::vector<int64_t> wrapped;
  if (dims.empty()) {
    for (int64_t d = 0; d < ndim; ++d) wrapped.push_back(d);
    return wrapped;
  }
  for (int64_t dim : dims) wrapped.push_back(wrap_dim(dim, ndim, caller));
  std::sort(wrapped.begin(), wrapped.end());
  for (size_t i = 1; i < wrapped.size(); ++i)
    TANDEM_CHECK(wrapped[i] != wrapped[i - 1], caller, ": dimension ", wrapped[i], " appears more than once in ",
                 to_string(dims));
  return wrapped;
}

Tensor reshaped(const Tensor& contiguous_tensor, const Shape& shape) {
  TANDEM_INTERNAL_ASSERT(contiguous_tensor.is_contiguous() && numel_of(shape) == contiguous_tensor.numel(),
                         "reshaped: ", to_string(contiguous_tensor.shape()), " to ", to_string(shape));
  return alias(contiguous_tensor, shape, contiguous_strides(shape), contiguous_tensor.storage_offset());
}

Reduction plan_reduction(const Tensor& x, const std::vector<int64_t>& dims) {
  Reduction plan;
  const int64_t ndim = x.dim();
  std::vector<bool> reduced(static_cast<size_t>(ndim), false);
  for (int64_t d : dims) reduced[d] = true;
  plan.kept_shape = x.shape();
  for (int64_t d = 0; d < ndim; ++d) {
    if (reduced[d]) {
      plan.kept_shape[d] = 1;
    } else {
      plan.reduced_shape.push_back(x.size(d));
    }
  }
  const bool adjacent = dims.empty() || dims.back() - dims.front() + 1 == static_cast<int64_t>(dims.size());
  if (adjacent) {
    for (int64_t d = 0; d < ndim; ++d) {
      if (reduced[d]) {
        plan.reduce *= x.size(d);
      } else if (dims.empty() || d < dims.front()) {
        plan.outer *= x.size(d);
      } else {
        plan.inner *= x.size(d);
      }
    }
    plan.x = contiguous(x);
    return plan;
  }
  // Kept dims first, then the reduced ones: a permuted view, copied to be contiguous.
  Shape shape, strides;
  for (int pass = 0; pass < 2; ++pass)
    for (int64_t d = 0; d < ndim; ++d)
      if (reduced[d] == (pass == 1)) {
        shape.push_back(x.size(d));
        strides.push_back(x.strides()[d]);
        (pass == 0 ? plan.outer : plan.reduce) *= x.size(d);
      }
  plan.x = contiguous(alias(x, shape, strides, x.storage_offset()));
  return plan;
}

Tensor sum(const Reduction& plan, bool keepdim, float scale) {
  Tensor sums = sum_dim(reshaped(plan.x, {plan.outer, plan.reduce, plan.inner}), 1, false);
  if (scale != 1.0f) sums = raw::scale(sums, scale);
  return reshaped(sums, plan.shape(keepdim));
}

std::pair<Tensor, Tensor> reduce(backend::ReduceOp op, const Reduction& plan, bool keepdim, bool with_indices) {
  const Device device = plan.x.device();
  Tensor values = Tensor::empty(plan.shape(keepdim), device);
  Tensor indices = with_indices ? Tensor::empty(plan.shape(keepdim), DType::Int64, device) : Tensor();
  if (values.numel() > 0)
    backend::for_device(device).reduce_dim(op, plan.x, plan.outer, plan.reduce, plan.inner, values, indices);
  return {values, indices};
}

void check_index_dtype(const char* caller, const Tensor& index) {
  TANDEM_CHECK(index.dtype() == DType::Int64, caller, ": index is ", index.dtype(),
               " but expected int64 (convert with ", conversion_hint(DType::Int64), ")");
}

std::vector<int64_t> index_values(const char* caller, const Tensor& index) {
  check_index_dtype(caller, index);
  return index.to_vector_as<int64_t>();
}

void check_index_range(const char* caller, const std::vector<int64_t>& values, int64_t limit, int64_t dim) {
  for (size_t i = 0; i < values.size(); ++i) {
    const int64_t v = values[i];
    if (v >= 0 && v < limit) continue;
    if (dim >= 0)
      TANDEM_FAIL(caller, ": index ", v, " at position ", i, " is out of range for dimension ", dim, " of size ",
                  limit);
    TANDEM_FAIL(caller, ": index ", v, " at position ", i, " is out of range for ", limit, " classes");
  }
}

void check_indices(const char* caller, const Tensor& index, int64_t limit, int64_t dim) {
  if (is_capturing(index.device())) {
    check_index_dtype(caller, index);
    backend::cuda_check_indices_on_device(caller, index, limit, dim, std::nullopt);
    return;
  }
  check_index_range(caller, index_values(caller, index), limit, dim);
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  Tensor out = Tensor::empty(index.shape(), x.device());
  if (out.numel() > 0) backend::for_device(x.device()).gather(x, dim, index, out);
  return out;
}

void scatter_add_into(const Tensor& target, int64_t dim, const Tensor& index, const Tensor& src) {
  if (src.numel() > 0) backend::for_device(target.device()).scatter_add(src, dim, index, target);
}

Tensor scatter_add(const Tensor& src, int64_t dim, const Tensor& index, const Shape& shape, Device device) {
  Tensor target = Tensor::zeros(shape, device);
  scatter_add_into(target, dim, index, src);
  return target;
}

}  // namespace tandem::raw
