// fused_attention: softmax(scale * q k^T) v as one op whose forward and backward are single backend calls
// (Backend::attention_forward / attention_backward), the scores never stored.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <optional>
#include <utility>

#include "raw_ops.h"
#include "tandem/core/autograd.h"
#include "tandem/core/error.h"
#include "tandem/core/matmul_settings.h"
#include "tandem/core/ops.h"

namespace tandem {

using autograd::Function;

namespace {

constexpr const char* kOp = "fused_attention";

bool supported_head_dim(int64_t e) { return e == 32 || e == 64 || e == 128; }

// t [batch..., rows, E] as the 4-D view [B1, B2, rows, E] that the backend reads and writes (backend::AttentionCall):
// adjacent batch dims merged where their strides allow, unit dims dropped; nothing when t's layout is not such a view
// (more than two batch dims left, the last dim not contiguous, a stride that is not a multiple of 8 or a start that is
// not 16-byte aligned).
std::optional<Tensor> operand_alias(const Tensor& t) {
  std::vector<std::pair<int64_t, int64_t>> batch;  // (size, stride)
  for (int64_t d = 0; d + 2 < t.dim(); ++d) {
    const int64_t size = t.size(d), stride = t.strides()[d];
    if (size == 1) continue;
    if (!batch.empty() && batch.back().second == size * stride) {
      batch.back() = {batch.back().first * size, stride};
    } else {
      batch.emplace_back(size, stride);
    }
  }
  while (batch.size() < 2) batch.insert(batch.begin(), {1, 0});
  const int64_t rows = t.size(-2), e = t.size(-1);
  const int64_t row_stride = rows == 1 ? e : t.strides()[t.dim() - 2];
  const bool fits = batch.size() == 2 && t.strides().back() == 1 && batch[0].second % 8 == 0 &&
                    batch[1].second % 8 == 0 && row_stride % 8 == 0 &&
                    reinterpret_cast<uintptr_t>(t.data_ptr()) % 16 == 0;
  if (!fits) return std::nullopt;
  return raw::alias(t, {batch[0].first, batch[1].first, rows, e}, {batch[0].second, batch[1].second, row_stride, 1},
                    t.storage_offset());
}

// An operand's 4-D view (operand_alias), of a contiguous copy of t where t's layout is not one.
Tensor operand_view(const Tensor& t) {
  if (std::optional<Tensor> view = operand_alias(t)) return *view;
  const Tensor packed = raw::allocate(t.shape(), t.dtype(), t.device(), false, kOp);
  raw::copy(t, packed);
  return *operand_alias(packed);
}

// Note [Outputs in their inputs' layout]: out, dq, dk and dv are new dense tensors laid out as the operands they
// belong to (dense_strides_like), where that layout is an operand's view, else contiguous. Heads viewed from a
// [B, T, H, E] projection (x.reshape({B, T, H, E}).transpose(1, 2)) thus get an out that is [B, T, H, E] in memory,
// whose transpose back and reshape to [B, T, H E] are views, and gradients that the views' backward passes through
// without a copy.
Tensor output_like(const Shape& shape, const Shape& strides, DType dtype, Device device) {
  const Shape dense = dense_strides_like(shape, strides);
  if (!dense.empty() && dense.back() == 1) {
    const Tensor storage = raw::allocate({numel_of(shape)}, dtype, device, false, kOp);
    const Tensor laid_out = raw::alias(storage, shape, dense, 0);
    if (operand_alias(laid_out)) return laid_out;
  }
  return raw::allocate(shape, dtype, device, false, kOp);
}

// t in the dtype that a product in `precision` multiplies (Note [Precision modes]): bfloat16 for BFloat16, else
// float32 (TF32 runs the float32 kernels); t itself when it has that dtype.
Tensor in_compute_dtype(const Tensor& t, Precision precision) {
  const DType dtype = precision == Precision::BFloat16 ? DType::BFloat16 : DType::Float32;
  return t.dtype() == dtype ? t : raw::convert(t, dtype);
}

// Note [Gradients of packed heads]: q, k and v split from one projection ([B, T, 3 H E] viewed as three [B, H, T, E]
// heads) lie in one storage with one layout, each in its own window of E * H elements of every row. Their gradients
// are then written as views of one new tensor at the same places, so that the views' backward passes hand them to
// split's, which finds them already joined (Note [Split gradients] in views.cpp) and copies nothing. The windows are
// checked on the operands' 4-D views [B1, B2, rows, E] (one shape and strides (s1, s2, r, 1)): the B2 dim is dense
// over E (s2 == E, so a row's elements of one operand are W = B2 E consecutive ones), the operands start at
// distinct offsets d within [0, r - W] of the lowest that are W or more apart (their windows do not meet) and
// multiples of 4 (16-byte aligned floats), there are two rows or more, and s1 >= rows r (the B1 matrices do not meet
// either). Returns the offsets d and the span of the new tensor, or nothing when the operands are not so laid out.
struct PackedHeads {
  int64_t offsets[3];
  int64_t span;
};

std::optional<PackedHeads> packed_heads(const Tensor (&in)[3]) {
  std::optional<Tensor> views[3];
  for (int i = 0; i < 3; ++i) {
    views[i] = operand_alias(in[i]);
    if (!views[i] || !in[i].shares_storage_with(in[0]) || in[i].shape() != in[0].shape() ||
        views[i]->strides() != views[0]->strides() || in[i].numel() == 0) {
      return std::nullopt;
    }
  }
  const Shape& shape = views[0]->shape();
  const Shape& strides = views[0]->strides();
  const int64_t e = shape[3], rows = shape[2], width = shape[1] * e, row = strides[2];
  if (rows < 2 || (shape[1] > 1 && strides[1] != e) || (shape[0] > 1 && strides[0] < rows * row)) return std::nullopt;
  const int64_t lowest = std::min({in[0].storage_offset(), in[1].storage_offset(), in[2].storage_offset()});
  PackedHeads packed{};
  for (int i = 0; i < 3; ++i) {
    const int64_t d = in[i].storage_offset() - lowest;
    if (d % 4 != 0 || d + width > row) return std::nullopt;
    for (int j = 0; j < i; ++j)
      if (std::abs(d - packed.offsets[j]) < width) return std::nullopt;
    packed.offsets[i] = d;
  }
  const int64_t last = (shape[0] - 1) * strides[0] + (rows - 1) * row + width;
  packed.span = *std::max_element(packed.offsets, packed.offsets + 3) + last;
  return packed;
}

class Attention final : public Function {
 public:
  Attention(float scale, bool causal, Precision precision, double dropout_p)
      : scale_(scale), causal_(causal), precision_(precision), dropout_p_(dropout_p) {}

  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    for (int i = 0; i < 3; ++i) {
      shapes_[i] = in[i].shape();
      strides_[i] = in[i].strides();
      dtypes_[i] = in[i].dtype();
    }
    packed_ = packed_heads({in[0], in[1], in[2]});
    if (dropout_p_ > 0.0) {
      // One value per probability, reserved as nn::dropout reserves them for the [..., L, S] weights.
      const auto rows = static_cast<uint64_t>(in[0].numel() / in[0].size(-1));
      const uint64_t count = rows * static_cast<uint64_t>(in[1].size(-2));
      dropout_ = detail::DropoutMask::of(dropout_p_, backend::reserve_draws(in[0].device(), count, kOp));
    }
    const backend::AttentionCall call = call_of(in[0], in[1], in[2]);
    Shape lse_shape = in[0].shape();
    lse_shape.pop_back();
    const Tensor out = output_like(shapes_[0], strides_[0], in[0].dtype(), in[0].device());
    const Tensor out_view = *operand_alias(out);
    const Tensor lse = raw::allocate(lse_shape, DType::Float32, in[0].device(), false, kOp);
    backend::for_device(out.device()).attention_forward(call, out_view, lse);
    save_for_backward({call.q, call.k, call.v, out_view, lse});
    return {out};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    const std::vector<Tensor>& saved = saved_tensors();
    const backend::AttentionCall call{saved[0], saved[1], saved[2], scale_, causal_, dropout_};
    const Tensor grad_out = operand_view(in_compute_dtype(grads[0], precision_));
    std::vector<Tensor> result = gradients_like_operands(saved[0].device()), views(3);
    for (int i = 0; i < 3; ++i) views[i] = *operand_alias(result[i]);
    backend::for_device(grad_out.device())
        .attention_backward(call, saved[3], grad_out, saved[4], views[0], views[1], views[2]);
    for (int i = 0; i < 3; ++i) {
      if (!needs_input_grad(i)) {
        result[i] = Tensor();
      } else if (dtypes_[i] != DType::Float32) {
        result[i] = raw::convert(result[i], dtypes_[i]);
      }
    }
    return result;
  }

  std::string name() const override { return "FusedAttentionBackward"; }

 private:
  // New float32 tensors for the gradients of q, k and v, laid out as Note [Gradients of packed heads] or
  // Note [Outputs in their inputs' layout] says.
  std::vector<Tensor> gradients_like_operands(Device device) const {
    std::vector<Tensor> grads(3);
    if (packed_) {
      const Tensor joined = raw::allocate({packed_->span}, DType::Float32, device, false, kOp);
      for (int i = 0; i < 3; ++i) grads[i] = raw::alias(joined, shapes_[i], strides_[i], packed_->offsets[i]);
      return grads;
    }
    for (int i = 0; i < 3; ++i) grads[i] = output_like(shapes_[i], strides_[i], DType::Float32, device);
    return grads;
  }

  backend::AttentionCall call_of(const Tensor& q, const Tensor& k, const Tensor& v) const {
    return {operand_view(in_compute_dtype(q, precision_)), operand_view(in_compute_dtype(k, precision_)),
            operand_view(in_compute_dtype(v, precision_)), scale_, causal_, dropout_};
  }

  float scale_;
  bool causal_;
  Precision precision_;
  double dropout_p_;
  detail::DropoutMask dropout_;  // the forward's mask, redrawn by the backward
  Shape shapes_[3], strides_[3];  // the operands'
  DType dtypes_[3] = {};
  std::optional<PackedHeads> packed_;
};

void check_operand(const Tensor& t, const char* what, const char* rows) {
  raw::check_defined(kOp, t, what);
  TANDEM_CHECK(t.dim() >= 2, kOp, ": ", what, " has shape ", to_string(t.shape()), " but expected [..., ", rows,
               ", E]");
  TANDEM_CHECK(t.dtype() == DType::Float32 || t.dtype() == DType::BFloat16, kOp, ": ", what, " is ", t.dtype(),
               " but expected float32 or bfloat16");
}

}  // namespace

Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool is_causal,
                       std::optional<Precision> precision, double dropout_p) {
  check_operand(q, "q", "L");
  check_operand(k, "k", "S");
  check_operand(v, "v", "S");
  raw::check_same_device(kOp, q, k);
  raw::check_same_device(kOp, q, v);
  TANDEM_CHECK(q.dtype() == k.dtype() && q.dtype() == v.dtype(), kOp, ": q, k and v are ", q.dtype(), ", ",
               k.dtype(), " and ", v.dtype(), "; expected one dtype");
  const Shape batch(q.shape().begin(), q.shape().end() - 2);
  TANDEM_CHECK(Shape(k.shape().begin(), k.shape().end() - 2) == batch &&
                   Shape(v.shape().begin(), v.shape().end() - 2) == batch,
               kOp, ": q ", to_string(q.shape()), ", k ", to_string(k.shape()), " and v ", to_string(v.shape()),
               " have different batch dims (they are not broadcast)");
  TANDEM_CHECK(k.size(-2) == v.size(-2), kOp, ": k [..., S, E] has shape ", to_string(k.shape()),
               " and v [..., S, E] ", to_string(v.shape()), ", but their S differ");
  TANDEM_CHECK(q.size(-1) == k.size(-1) && q.size(-1) == v.size(-1), kOp, ": q, k and v have head dims ", q.size(-1),
               ", ", k.size(-1), " and ", v.size(-1), "; expected one head dim");
  TANDEM_CHECK(supported_head_dim(q.size(-1)), kOp, ": head dim ", q.size(-1),
               " is not supported (32, 64 or 128; nn::scaled_dot_product_attention takes any)");
  TANDEM_CHECK(std::isfinite(scale), kOp, ": scale is ", scale, " but expected a finite number");
  TANDEM_CHECK(dropout_p >= 0.0 && dropout_p < 1.0, kOp, ": dropout_p is ", dropout_p,
               " but expected a probability in [0, 1)");
  const auto node = std::make_shared<Attention>(static_cast<float>(scale), is_causal,
                                                precision.value_or(default_precision()), dropout_p);
  return autograd::apply_one(node, {q, k, v});
}

}  // namespace tandem
