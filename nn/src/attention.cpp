#include "tandem/nn/attention.h"

#include "attention_bias.h"

#include <cmath>
#include <limits>

#include "tandem/core/error.h"
#include "tandem/core/matmul_settings.h"
#include "tandem/core/ops.h"
#include "tandem/nn/dropout.h"

namespace tandem::nn {
namespace {

constexpr const char* kOp = "nn::scaled_dot_product_attention";

void check_input(const Tensor& t, const char* what) {
  TANDEM_CHECK(t.defined(), kOp, ": ", what, " is an undefined tensor");
  TANDEM_CHECK(t.dim() >= 2, kOp, ": ", what, " has shape ", to_string(t.shape()), " but expected [..., ",
               what[0] == 'q' ? "L" : "S", ", E]");
}

// Whether the call is one that fused_attention computes: no mask, one head dim of 32, 64 or 128 for q, k and v, equal
// batch dims, float32 inputs (the reference path's dtype), and the switch on.
bool fused_applies(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& attn_mask) {
  const int64_t e = q.size(-1);
  const auto batch_of = [](const Tensor& t) { return Shape(t.shape().begin(), t.shape().end() - 2); };
  return fused_attention_enabled() && !attn_mask.defined() && (e == 32 || e == 64 || e == 128) &&
         k.size(-1) == e && v.size(-1) == e && batch_of(q) == batch_of(k) && batch_of(q) == batch_of(v) &&
         q.dtype() == DType::Float32 && k.dtype() == DType::Float32 && v.dtype() == DType::Float32;
}

// Whether `shape` broadcasts to `target` (NumPy's rules, target unchanged).
bool broadcasts_to(const Shape& shape, const Shape& target) {
  if (shape.size() > target.size()) return false;
  const size_t extra = target.size() - shape.size();
  for (size_t d = 0; d < shape.size(); ++d) {
    if (shape[d] != 1 && shape[d] != target[extra + d]) return false;
  }
  return true;
}

}  // namespace

namespace detail {

Tensor causal_bias(int64_t queries, int64_t keys, Device device) {
  // made on the device (no host values), so that a captured step may build it
  const Tensor after_the_query = triu(Tensor::ones({queries, keys}, device), 1);  // key j > query i
  return where(after_the_query, Tensor::full({}, -std::numeric_limits<float>::infinity(), device),
               Tensor::zeros({}, device));
}

Tensor mask_bias(const Tensor& mask, bool nonzero_left_out, const char* op, const char* what) {
  TANDEM_CHECK(mask.dtype() == DType::Int64 || mask.dtype() == DType::Float32, op, ": ", what, " is ", mask.dtype(),
               " but expected int64 (a boolean mask: nonzero ", nonzero_left_out ? "is left out" : "takes part",
               ") or float32 (added to the scores)");
  if (mask.dtype() == DType::Float32) return mask;
  const Tensor zero = Tensor::zeros({}, mask.device());
  const Tensor out = Tensor::full({}, -std::numeric_limits<float>::infinity(), mask.device());
  const Tensor nonzero = ne(mask.to(DType::Float32), 0.0f);
  return nonzero_left_out ? where(nonzero, out, zero) : where(nonzero, zero, out);
}

}  // namespace detail

Tensor scaled_dot_product_attention(const Tensor& query, const Tensor& key, const Tensor& value,
                                    const Tensor& attn_mask, double dropout_p, bool is_causal,
                                    std::optional<double> scale) {
  check_input(query, "query");
  check_input(key, "key");
  check_input(value, "value");
  TANDEM_CHECK(query.size(-1) == key.size(-1), kOp, ": query [..., L, E] has shape ", to_string(query.shape()),
               " and key [..., S, E] ", to_string(key.shape()), ", but their E differ");
  TANDEM_CHECK(key.size(-2) == value.size(-2), kOp, ": key [..., S, E] has shape ", to_string(key.shape()),
               " and value [..., S, Ev] ", to_string(value.shape()), ", but their S differ");
  TANDEM_CHECK(!(attn_mask.defined() && is_causal), kOp, ": attn_mask and is_causal are both given; pass one");
  TANDEM_CHECK(dropout_p >= 0.0 && dropout_p < 1.0, kOp, ": dropout_p is ", dropout_p,
               " but expected a probability in [0, 1)");
  const double factor = scale.value_or(1.0 / std::sqrt(static_cast<double>(query.size(-1))));
  TANDEM_CHECK(std::isfinite(factor), kOp, ": scale is ", factor, " but expected a finite number");

  if (fused_applies(query, key, value, attn_mask)) {
    return fused_attention(query, key, value, factor, is_causal, default_precision(), dropout_p);
  }
  Tensor scores = matmul(query, key.transpose(-2, -1)) * static_cast<float>(factor);
  if (is_causal) scores = scores + detail::causal_bias(query.size(-2), key.size(-2), query.device());
  if (attn_mask.defined()) {
    TANDEM_CHECK(broadcasts_to(attn_mask.shape(), scores.shape()), kOp, ": attn_mask of shape ",
                 to_string(attn_mask.shape()), " does not broadcast to the scores' shape ", to_string(scores.shape()));
    TANDEM_CHECK(attn_mask.device() == query.device(), kOp, ": attn_mask is on ", attn_mask.device(),
                 " but the inputs on ", query.device());
    scores = scores + detail::mask_bias(attn_mask, /*nonzero_left_out=*/false, kOp, "attn_mask");
  }
  Tensor weights = softmax(scores, -1);
  if (dropout_p > 0.0) weights = dropout(weights, dropout_p);
  return matmul(weights, value);
}

}  // namespace tandem::nn
