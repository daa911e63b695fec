#pragma once
// Non-differentiable building blocks: check inputs, allocate outputs, call the device's backend. The
// differentiable ops (ops.cpp, views.cpp) and backward functions are written with these; nothing here records
// autograd history.

#include <vector>

#include "backend.h"
#include "tandem/core/tensor.h"

namespace tandem::raw {

// Throws Error("<caller>: expected all tensors on one device, got cpu:0 and cuda:0").
void check_same_device(const char* caller, const Tensor& a, const Tensor& b);
void check_defined(const char* caller, const Tensor& t, const char* what = "input");

// A new tensor sharing t's storage with the given geometry (no autograd metadata).
Tensor alias(const Tensor& t, const Shape& shape, const Shape& strides, int64_t offset);
Tensor empty_like(const Tensor& t);

Tensor binary(backend::BinaryOp op, const Tensor& a, const Tensor& b, const char* caller);
Tensor scale(const Tensor& x, float s);
Tensor unary(backend::UnaryOp op, const Tensor& x);
Tensor unary_backward(backend::UnaryOp op, const Tensor& grad, const Tensor& saved);
// 2-D a @ b into a new tensor, with `epilogue` fused in (Backend::gemm; its accumulate must be false).
Tensor gemm(const Tensor& a, const Tensor& b, const backend::GemmEpilogue& epilogue = {});
// out = a @ b, or out += a @ b with epilogue.accumulate, with `epilogue` fused in; out is a contiguous [m, n] tensor
// on a's device, sharing no memory with a, b or the epilogue's tensors.
void gemm_into(const Tensor& a, const Tensor& b, const backend::GemmEpilogue& epilogue, const Tensor& out);
Tensor sum_dim(const Tensor& x, int64_t dim, bool keepdim);
Tensor sum_all(const Tensor& x, float scale);
Tensor broadcast_scalar(const Tensor& scalar, float scale, const Shape& shape);
Tensor mse_forward(const Tensor& input, const Tensor& target);
Tensor mse_backward(const Tensor& grad, const Tensor& input, const Tensor& target);
Tensor sum_to(const Tensor& x, const Shape& shape);  // reduces broadcast dimensions
Tensor expand(const Tensor& x, const Shape& shape, const char* caller);
Tensor contiguous(const Tensor& x);
Tensor to_device(const Tensor& x, Device device);  // always a new contiguous tensor
// dst = src (same shape; any devices; any strides)
void copy(const Tensor& src, const Tensor& dst);

}  // namespace tandem::raw
