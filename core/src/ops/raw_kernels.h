#pragma once
// Non-differentiable building blocks of the ops in this folder, over the backends' general kernels (reductions
// along one dimension, gather / scatter-add; raw::pointwise is raw_ops.h's). Like raw_ops.h: inputs are checked,
// outputs allocated, nothing records autograd history.

#include <utility>
#include <vector>

#include "raw_ops.h"

namespace tandem::raw {

// The dimensions a reduction runs over: `dims` wrapped into [0, ndim), sorted; all of them when `dims` is empty.
// Errors: a dimension out of range or given twice.
std::vector<int64_t> reduction_dims(const std::vector<int64_t>& dims, int64_t ndim, const char* caller);

// x as a contiguous [outer, reduce, inner] tensor, where `reduce` covers the (sorted, wrapped) `dims`: a view when
// they are adjacent, else a copy with them moved last. kept_shape is x's shape with those dims set to 1, and
// reduced_shape the same without them.
struct Reduction {
  Tensor x;
  int64_t outer = 1, reduce = 1, inner = 1;
  Shape kept_shape, reduced_shape;
  const Shape& shape(bool keepdim) const { return keepdim ? kept_shape : reduced_shape; }
};
Reduction plan_reduction(const Tensor& x, const std::vector<int64_t>& dims);

// scale * sum over the planned dims, with the shape `keepdim` asks for.
Tensor sum(const Reduction& plan, bool keepdim, float scale);
// values (and, for Max / Min when `with_indices`, their int64 indices along the reduced dims) over the planned dims;
// reduce must be >= 1.
std::pair<Tensor, Tensor> reduce(backend::ReduceOp op, const Reduction& plan, bool keepdim, bool with_indices);

// A contiguous tensor seen with another shape of the same number of elements (no copy).
Tensor reshaped(const Tensor& contiguous_tensor, const Shape& shape);

// Note [Index checks]: index tensors are int64, as in PyTorch; a float32 or bfloat16 index is an Error naming the op.
// Their values are read on the host and checked there before any kernel reads them, so that no kernel reads or writes
// outside its tensors. The price is one device-to-host copy per call: on a GPU the host waits for the work queued
// before it (the copy synchronizes with the device's compute stream). While a DeviceGraph captures the index's GPU,
// where nothing may wait, check_indices checks on the device instead and the error comes later (Note [Index checks on
// the device] in backend.h).
//
// Throws unless index is int64, naming `caller` ("index_select: index is float32 but expected int64 (convert with
// .to(DType::Int64))").
void check_index_dtype(const char* caller, const Tensor& index);
// index's values, copied to the host in row-major order. Errors: those of check_index_dtype.
std::vector<int64_t> index_values(const char* caller, const Tensor& index);
// Throws Error naming `caller` unless every value lies in [0, limit); the message names the value, its position in
// `values` and dimension `dim` of size limit, or (dim < 0) limit classes.
void check_index_range(const char* caller, const std::vector<int64_t>& values, int64_t limit, int64_t dim);
// index_values, then check_index_range; on the device under a capture.
void check_indices(const char* caller, const Tensor& index, int64_t limit, int64_t dim);
// out (index's shape) = x gathered along dim (Backend::gather); index already checked.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// target (contiguous) += src scatter-added along dim at index, src and index of one shape (Backend::scatter_add);
// index already checked.
void scatter_add_into(const Tensor& target, int64_t dim, const Tensor& index, const Tensor& src);
// zeros(shape) with src scatter-added along dim at index; index already checked.
Tensor scatter_add(const Tensor& src, int64_t dim, const Tensor& index, const Shape& shape, Device device);

}  // namespace tandem::raw
