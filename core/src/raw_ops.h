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

// Note [Dtypes of ops]: arithmetic is float32 only; int64 and bfloat16 tensors are data to move, view, copy and
// convert. Each float op checks its inputs with check_float32 before it reads them: the differentiable ops (ops.cpp)
// under the user-facing op name, and the raw compute ops below again, so that an op written with raw ops is covered
// too. Last, Tensor::data()/mutable_data(), which every float kernel of both backends reads its operands through,
// refuse other dtypes: no kernel reads int64 or bfloat16 bytes as floats.
//
// Throws unless every defined tensor in `tensors` is float32:
//   "<op>: got float32 and int64; expected one dtype (convert with .to(DType::Float32))" when they differ,
//   "<op>: got int64 but expected float32 (convert with .to(DType::Float32))" when they agree on another dtype.
void check_float32(const char* op, const std::vector<Tensor>& tensors);
// ".to(DType::Float32)": how a message tells the caller to convert to `dtype`.
const char* conversion_hint(DType dtype);

// A new contiguous tensor over new storage on `device` (pinned: page-locked host memory, Storage's contract);
// `caller` names the function in errors.
Tensor allocate(const Shape& shape, DType dtype, Device device, bool pinned, const char* caller);
// A new tensor sharing t's storage with the given geometry (no autograd metadata).
Tensor alias(const Tensor& t, const Shape& shape, const Shape& strides, int64_t offset);

// out (any strides, any dtype) = value, converted to out's dtype with a check (scalar_cast.h; `caller` names the
// function in its error).
void fill(const Tensor& out, double value, const char* caller);
// A new contiguous tensor on x's device holding x's values converted to `dtype` (Note [Conversions]).
Tensor convert(const Tensor& x, DType dtype);

// out = f(inputs...) with the inputs broadcast together (NumPy rules): every elementwise op goes through here
// (Backend::pointwise). Errors name `caller`: an undefined input, a dtype other than float32, inputs on different
// devices, shapes that do not broadcast.
Tensor pointwise(const backend::PointwiseCall& call, const std::vector<Tensor>& inputs, const char* caller);
// s * x (pointwise Scale; errors name "mul").
Tensor scale(const Tensor& x, float s);
// 2-D a @ b into a new float32 tensor, with `options` fused in (Backend::gemm; its accumulate must be false).
Tensor gemm(const Tensor& a, const Tensor& b, const backend::GemmOptions& options = {});
// out = a @ b, or out += a @ b with options.accumulate, with `options` fused in; out is a contiguous float32 [m, n]
// tensor on a's device, sharing no memory with a, b or the options' tensors. a and b: bfloat16 for a BFloat16
// product (gemm_input), float32 otherwise.
void gemm_into(const Tensor& a, const Tensor& b, const backend::GemmOptions& options, const Tensor& out);
// gemm_into(first.a, first.b, first.options, first.out), then the same for second, where neither product reads or
// writes what the other writes (its out and row sums); the backend may run them together (Backend::gemm_pair).
void gemm_pair_into(const backend::GemmCall& first, const backend::GemmCall& second);
// a [..., m, k] @ b [..., k, n] for every matrix of their batch dims (equal in both, broadcast already: stride 0 is
// fine) into a new contiguous float32 [..., m, n] tensor, in `precision` (Backend::gemm_batched): operands whose batch
// dims merge into one and whose matrices have a product's layout are read in place, others copied first.
Tensor gemm_batched(const Tensor& a, const Tensor& b, Precision precision);
// t as an operand of a product in `precision`: for BFloat16 a contiguous bfloat16 copy (rounded to nearest even;
// t itself when it is bfloat16 already), otherwise t. Note [Precision modes] in tandem/core/precision.h.
Tensor gemm_input(const Tensor& t, Precision precision);
Tensor sum_dim(const Tensor& x, int64_t dim, bool keepdim);
Tensor sum_all(const Tensor& x, float scale);
Tensor broadcast_scalar(const Tensor& scalar, float scale, const Shape& shape);
Tensor mse_forward(const Tensor& input, const Tensor& target);
Tensor mse_backward(const Tensor& grad, const Tensor& input, const Tensor& target);
Tensor sum_to(const Tensor& x, const Shape& shape);  // reduces broadcast dimensions
Tensor expand(const Tensor& x, const Shape& shape, const char* caller);
Tensor contiguous(const Tensor& x);
Tensor to_device(const Tensor& x, Device device);  // always a new contiguous tensor of x's dtype
// A new tensor on the CUDA device `device` filled from x (contiguous, pinned) without the host waiting
// (backend::cuda_copy_from_pinned).
Tensor to_device_from_pinned(const Tensor& x, Device device);
// A new contiguous copy of the CPU tensor x in page-locked memory on x's device; `caller` names the function in errors.
Tensor pinned_copy(const Tensor& x, const char* caller);
// dst = src (same shape; any devices; any strides; any dtypes, converted as Note [Conversions] says)
void copy(const Tensor& src, const Tensor& dst);

}  // namespace tandem::raw
