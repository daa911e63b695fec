#include "raw_ops.h"

#include <algorithm>
#include <cstring>
#include <optional>

#include "scalar_cast.h"
#include "tandem/core/error.h"

namespace tandem::raw {

void check_defined(const char* caller, const Tensor& t, const char* what) {
  TANDEM_CHECK(t.defined(), caller, ": ", what, " is an undefined tensor");
}

void check_same_device(const char* caller, const Tensor& a, const Tensor& b) {
  TANDEM_CHECK(a.device() == b.device(), caller, ": expected all tensors on one device, got ", a.device(), " and ",
               b.device());
}

void check_float32(const char* op, const std::vector<Tensor>& tensors) {
  const Tensor* first = nullptr;
  for (const Tensor& t : tensors) {
    if (!t.defined()) continue;
    if (first == nullptr) {
      first = &t;
      continue;
    }
    TANDEM_CHECK(t.dtype() == first->dtype(), op, ": got ", first->dtype(), " and ", t.dtype(),
                 "; expected one dtype (convert with ", conversion_hint(DType::Float32), ")");
  }
  TANDEM_CHECK(first == nullptr || first->dtype() == DType::Float32, op, ": got ", first->dtype(),
               " but expected float32 (convert with ", conversion_hint(DType::Float32), ")");
}

const char* conversion_hint(DType dtype) {
  switch (dtype) {
    case DType::Float32: return ".to(DType::Float32)";
    case DType::Int64: return ".to(DType::Int64)";
    case DType::BFloat16: return ".to(DType::BFloat16)";
  }
  TANDEM_INTERNAL_ASSERT(false, "conversion_hint: unknown dtype ", static_cast<int>(dtype));
}

Tensor alias(const Tensor& t, const Shape& shape, const Shape& strides, int64_t offset) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = t.storage();
  impl->offset = offset;
  impl->shape = shape;
  impl->strides = strides;
  impl->dtype = t.dtype();
  return Tensor(std::move(impl));
}

Tensor allocate(const Shape& shape, DType dtype, Device device, bool pinned, const char* caller) {
  const size_t nbytes = checked_nbytes(shape, element_size(dtype), caller);
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::make_shared<Storage>(device, nbytes, pinned, caller);
  impl->shape = shape;
  impl->strides = contiguous_strides(shape);
  impl->dtype = dtype;
  return Tensor(std::move(impl));
}

namespace {

// The bit pattern of `value` as one element of `dtype`, in the low element_size(dtype) bytes.
uint64_t element_bits(double value, DType dtype, const char* caller) {
  uint64_t bits = 0;
  switch (dtype) {
    case DType::Float32: {
      const float element = detail::checked_scalar_cast<float>(value, caller);
      std::memcpy(&bits, &element, sizeof(element));
      break;
    }
    case DType::Int64: {
      const int64_t element = detail::checked_scalar_cast<int64_t>(value, caller);
      std::memcpy(&bits, &element, sizeof(element));
      break;
    }
    case DType::BFloat16: bits = detail::checked_scalar_cast<BFloat16>(value, caller).bits(); break;
  }
  return bits;
}

}  // namespace

void fill(const Tensor& out, double value, const char* caller) {
  const uint64_t bits = element_bits(value, out.dtype(), caller);
  if (out.numel() == 0) return;
  if (out.dtype() == DType::Float32) {
    float element;
    std::memcpy(&element, &bits, sizeof(element));
    backend::for_device(out.device()).fill(out, element);
  } else {
    backend::for_device(out.device()).fill_bits(out, bits);
  }
}

Tensor convert(const Tensor& x, DType dtype) {
  Tensor out = Tensor::empty(x.shape(), dtype, x.device());
  copy(x, out);
  return out;
}

Tensor expand(const Tensor& x, const Shape& shape, const char* caller) {
  const int64_t extra = static_cast<int64_t>(shape.size()) - x.dim();
  TANDEM_CHECK(extra >= 0, caller, ": cannot expand shape ", to_string(x.shape()), " to ", to_string(shape));
  Shape out_shape(shape.size());
  Shape strides(shape.size(), 0);
  for (int64_t i = 0; i < static_cast<int64_t>(shape.size()); ++i) {
    const int64_t want = shape[i];
    if (i < extra) {
      TANDEM_CHECK(want >= 0, caller, ": cannot expand shape ", to_string(x.shape()), " to ", to_string(shape));
      out_shape[i] = want;
      continue;
    }
    const int64_t have = x.shape()[i - extra];
    if (want == -1 || want == have) {
      out_shape[i] = have;
      strides[i] = x.strides()[i - extra];
    } else {
      TANDEM_CHECK(have == 1 && want >= 0, caller, ": cannot expand shape ", to_string(x.shape()), " to ",
                   to_string(shape), " (size ", have, " at dimension ", i - extra, " is not 1)");
      out_shape[i] = want;
    }
  }
  return alias(x, out_shape, strides, x.storage_offset());
}

Tensor pointwise(const backend::PointwiseCall& call, const std::vector<Tensor>& inputs, const char* caller) {
  TANDEM_INTERNAL_ASSERT(static_cast<int>(inputs.size()) == backend::arity(call.op), caller, ": ", inputs.size(),
                         " operands for a pointwise function of ", backend::arity(call.op));
  Shape shape;
  for (const Tensor& input : inputs) check_defined(caller, input);
  check_float32(caller, inputs);
  for (size_t k = 0; k < inputs.size(); ++k) {
    check_same_device(caller, inputs[0], inputs[k]);
    shape = k == 0 ? inputs[k].shape() : broadcast_shapes(shape, inputs[k].shape(), caller);
  }
  Tensor out = Tensor::empty(shape, inputs[0].device());
  if (out.numel() == 0) return out;
  std::vector<Tensor> expanded;
  for (const Tensor& input : inputs) expanded.push_back(expand(input, shape, caller));
  backend::for_device(out.device()).pointwise(call, expanded, out);
  return out;
}

Tensor contiguous(const Tensor& x) {
  if (x.is_contiguous()) return x;
  Tensor out = empty_like(x);
  if (out.numel() > 0) backend::for_device(x.device()).copy(x, out);
  return out;
}

Tensor scale(const Tensor& x, float s) { return pointwise({backend::Pointwise::Scale, s}, {x}, "mul"); }

namespace {

// BLAS takes a 2-D operand as row-major or transposed with a leading dimension; anything else is copied.
// Whether the matrices in t's last two dims are row-major or transposed views (Backend::gemm's operand layouts).
bool has_gemm_layout(const Tensor& t) {
  const int64_t rows = t.size(-2), cols = t.size(-1);
  const int64_t row_stride = t.strides()[t.dim() - 2], col_stride = t.strides()[t.dim() - 1];
  const bool row_major = col_stride == 1 && row_stride >= std::max<int64_t>(cols, 1);
  const bool transposed = row_stride == 1 && col_stride >= std::max<int64_t>(rows, 1);
  return row_major || transposed;
}

Tensor gemm_operand(const Tensor& t) { return has_gemm_layout(t) ? t : contiguous(t); }

// t ([..., rows, cols]) as the [count, rows, cols] operand of a batched product: a view when its batch dims merge
// into one (Note [Views of other shapes] in shape.h) and its matrices have a product's layout, else a contiguous copy.
Tensor batched_gemm_operand(const Tensor& t, int64_t count) {
  const Shape shape{count, t.size(-2), t.size(-1)};
  if (has_gemm_layout(t)) {
    if (const std::optional<Shape> strides = view_strides(t.shape(), t.strides(), shape)) {
      const Tensor batched = alias(t, shape, *strides, t.storage_offset());
      if (has_gemm_layout(batched)) return batched;
    }
  }
  const Tensor packed = contiguous(t);
  return alias(packed, shape, contiguous_strides(shape), packed.storage_offset());
}

// The left operand of a product that also sums its rows: contiguous, or the transpose of a contiguous tensor (the
// weight-gradient product's g^T), which both backends sum in one pass.
Tensor row_summed_operand(const Tensor& t) {
  const Tensor transpose = alias(t, {t.size(1), t.size(0)}, {t.strides()[1], t.strides()[0]}, t.storage_offset());
  return t.is_contiguous() || transpose.is_contiguous() ? t : contiguous(t);
}

}  // namespace

Tensor gemm(const Tensor& a, const Tensor& b, const backend::GemmOptions& options) {
  TANDEM_INTERNAL_ASSERT(!options.accumulate, "raw::gemm: a new tensor cannot be accumulated onto");
  Tensor out = Tensor::empty({a.size(0), b.size(1)}, a.device());
  gemm_into(a, b, options, out);
  return out;
}

namespace {

// gemm_into's product as the backend takes it, after its checks; nothing when it has nothing to compute.
std::optional<backend::GemmCall> backend_call(const Tensor& a, const Tensor& b, const backend::GemmOptions& options,
                                              const Tensor& out) {
  const bool bf16 = options.precision == Precision::BFloat16;
  TANDEM_INTERNAL_ASSERT(!bf16 || (a.dtype() == DType::BFloat16 && b.dtype() == DType::BFloat16),
                         "raw::gemm_into: a BFloat16 product of ", a.dtype(), " and ", b.dtype(), " operands");
  check_float32("matmul", bf16 ? std::vector<Tensor>{options.bias, options.a_row_sums, out}
                               : std::vector<Tensor>{a, b, options.bias, options.a_row_sums, out});
  const Tensor& bias = options.bias;
  const Tensor& row_sums = options.a_row_sums;
  TANDEM_INTERNAL_ASSERT(out.dim() == 2 && out.size(0) == a.size(0) && out.size(1) == b.size(1) &&
                             out.is_contiguous() && out.device() == a.device(),
                         "raw::gemm_into: out has shape ", to_string(out.shape()), " on ", out.device(),
                         " but the product is [", a.size(0), ", ", b.size(1), "] on ", a.device());
  TANDEM_INTERNAL_ASSERT(!bias.defined() || (!options.accumulate && !row_sums.defined()),
                         "raw::gemm_into: a bias is not combined with accumulation or row sums");
  TANDEM_INTERNAL_ASSERT(!options.relu || (!options.accumulate && !row_sums.defined()),
                         "raw::gemm_into: relu is not combined with accumulation or row sums");
  TANDEM_INTERNAL_ASSERT(!row_sums.defined() || (row_sums.dim() == 1 && row_sums.size(0) == a.size(0) &&
                                                 row_sums.is_contiguous() && row_sums.device() == a.device()),
                         "raw::gemm_into: row sums of shape ", to_string(row_sums.shape()), " for a of shape ",
                         to_string(a.shape()));
  if (out.numel() == 0 && (!row_sums.defined() || row_sums.numel() == 0)) return std::nullopt;
  backend::GemmOptions fused = options;
  if (bias.defined()) fused.bias = contiguous(bias);
  const Tensor left = row_sums.defined() ? row_summed_operand(a) : a;
  return backend::GemmCall{.a = gemm_operand(left), .b = gemm_operand(b), .options = fused, .out = out};
}

void run(const backend::GemmCall& call) {
  backend::for_device(call.a.device()).gemm(call.a, call.b, call.options, call.out);
}

}  // namespace

void gemm_into(const Tensor& a, const Tensor& b, const backend::GemmOptions& options, const Tensor& out) {
  if (const auto call = backend_call(a, b, options, out)) run(*call);
}

void gemm_pair_into(const backend::GemmCall& first, const backend::GemmCall& second) {
  TANDEM_INTERNAL_ASSERT(first.a.device() == second.a.device(), "raw::gemm_pair_into: products on ",
                         first.a.device(), " and ", second.a.device());
  const auto one = backend_call(first.a, first.b, first.options, first.out);
  const auto other = backend_call(second.a, second.b, second.options, second.out);
  if (one && other) {
    backend::for_device(one->a.device()).gemm_pair(*one, *other);
  } else if (one || other) {
    run(one ? *one : *other);
  }
}

Tensor gemm_batched(const Tensor& a, const Tensor& b, Precision precision) {
  check_float32("matmul", {a, b});
  const Shape batch(a.shape().begin(), a.shape().end() - 2);
  TANDEM_INTERNAL_ASSERT(b.dim() == a.dim() && Shape(b.shape().begin(), b.shape().end() - 2) == batch &&
                             a.size(-1) == b.size(-2),
                         "raw::gemm_batched: shapes ", to_string(a.shape()), " and ", to_string(b.shape()));
  const int64_t m = a.size(-2), n = b.size(-1), count = numel_of(batch);
  Shape shape = batch;
  shape.insert(shape.end(), {m, n});
  Tensor out = Tensor::empty(shape, a.device());
  if (out.numel() == 0) return out;
  const Tensor lhs = batched_gemm_operand(gemm_input(a, precision), count);
  const Tensor rhs = batched_gemm_operand(gemm_input(b, precision), count);
  const Shape flat{count, m, n};
  backend::for_device(a.device()).gemm_batched(lhs, rhs, precision, alias(out, flat, contiguous_strides(flat), 0));
  return out;
}

Tensor gemm_input(const Tensor& t, Precision precision) {
  if (precision != Precision::BFloat16 || t.dtype() == DType::BFloat16) return t;
  return convert(t, DType::BFloat16);
}

Tensor sum_dim(const Tensor& x, int64_t dim, bool keepdim) {
  check_float32("sum", {x});
  Shape kept = x.shape();
  kept[dim] = 1;
  Shape reduced = x.shape();
  reduced.erase(reduced.begin() + dim);
  Tensor out = Tensor::empty(reduced, x.device());
  if (out.numel() > 0) {
    if (x.size(dim) == 0) {
      backend::for_device(x.device()).fill(out, 0.0f);
    } else {
      backend::for_device(x.device()).sum_dim(contiguous(x), dim, out);
    }
  }
  return keepdim ? alias(out, kept, contiguous_strides(kept), 0) : out;
}

Tensor sum_all(const Tensor& x, float scale) {
  check_float32("sum", {x});
  Tensor out = Tensor::empty({}, x.device());
  if (x.numel() == 0) {
    backend::for_device(x.device()).fill(out, 0.0f * scale);
  } else {
    backend::for_device(x.device()).sum_all(contiguous(x), scale, out);
  }
  return out;
}

Tensor broadcast_scalar(const Tensor& scalar, float scale, const Shape& shape) {
  check_float32("broadcast_scalar", {scalar});
  Tensor out = Tensor::empty(shape, scalar.device());
  if (out.numel() > 0) backend::for_device(scalar.device()).broadcast_scalar(scalar, scale, out);
  return out;
}

Tensor mse_forward(const Tensor& input, const Tensor& target) {
  check_float32("mse_loss", {input, target});
  Tensor out = Tensor::empty({}, input.device());
  backend::for_device(input.device()).mse_forward(contiguous(input), contiguous(target), out);
  return out;
}

Tensor mse_backward(const Tensor& grad, const Tensor& input, const Tensor& target) {
  check_float32("mse_loss backward", {grad, input, target});
  Tensor out = empty_like(input);
  if (out.numel() > 0)
    backend::for_device(input.device()).mse_backward(grad, contiguous(input), contiguous(target), out);
  return out;
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  Tensor result = x;
  const int64_t extra = x.dim() - static_cast<int64_t>(shape.size());
  TANDEM_CHECK(extra >= 0, "sum_to: cannot reduce shape ", to_string(x.shape()), " to ", to_string(shape));
  for (int64_t i = 0; i < extra; ++i) result = sum_dim(result, 0, false);
  for (int64_t i = 0; i < static_cast<int64_t>(shape.size()); ++i) {
    if (shape[i] == result.size(i)) continue;
    TANDEM_CHECK(shape[i] == 1, "sum_to: cannot reduce shape ", to_string(x.shape()), " to ", to_string(shape));
    result = sum_dim(result, i, true);
  }
  return result;
}

Tensor to_device(const Tensor& x, Device device) {
  Tensor out = Tensor::empty(x.shape(), x.dtype(), device);
  copy(x, out);
  return out;
}

Tensor to_device_from_pinned(const Tensor& x, Device device) {
  Tensor out = Tensor::empty(x.shape(), x.dtype(), device);
  backend::cuda_copy_from_pinned(x, out);
  return out;
}

Tensor pinned_copy(const Tensor& x, const char* caller) {
  Tensor out = allocate(x.shape(), x.dtype(), x.device(), /*pinned=*/true, caller);
  copy(x, out);
  return out;
}

void copy(const Tensor& src, const Tensor& dst) {
  TANDEM_CHECK(src.shape() == dst.shape(), "copy: source has shape ", to_string(src.shape()),
               " but destination has shape ", to_string(dst.shape()));
  if (dst.numel() == 0) return;
  if (src.device() == dst.device() || (src.device().is_cpu() && dst.device().is_cpu())) {
    // Virtual CPU devices share host memory, so a copy between them is a host copy.
    backend::for_device(dst.device()).copy(src, dst);
    return;
  }
  // Between devices the bytes move as they are: a conversion runs on the source's device first.
  const Tensor source = src.dtype() == dst.dtype() ? contiguous(src) : convert(src, dst.dtype());
  if (dst.is_contiguous()) {
    backend::cuda_copy_across_devices(source, dst);
    return;
  }
  const Tensor staged = empty_like(dst);
  backend::cuda_copy_across_devices(source, staged);
  backend::for_device(dst.device()).copy(staged, dst);
}

}  // namespace tandem::raw
