// Matrix products with torch.matmul's rules (matmul) and batched products (bmm): one product of matrices, or one
// batched product over broadcast batch dims, each differentiable; the vector and broadcast cases are views around
// them, whose own backward passes reshape and reduce the gradients.
#include <algorithm>

#include "raw_ops.h"
#include "tandem/core/autograd.h"
#include "tandem/core/error.h"
#include "tandem/core/matmul_settings.h"
#include "tandem/core/ops.h"

namespace tandem {

using autograd::apply_one;
using autograd::Function;

namespace {

// The last two dims of t swapped (a view, no history: the operands of the backward products).
Tensor matrices_transposed(const Tensor& t) {
  Shape shape = t.shape(), strides = t.strides();
  std::swap(shape[shape.size() - 2], shape[shape.size() - 1]);
  std::swap(strides[strides.size() - 2], strides[strides.size() - 1]);
  return raw::alias(t, shape, strides, t.storage_offset());
}

// a @ b as one GEMM, its gradients two more: a [m, k] @ b [k, n], or batched, a [..., m, k] @ b [..., k, n] over
// equal batch dims (broadcast by the caller's expand views, which read stride 0 in place), each gradient then of the
// operand's full batch shape (expand's backward sums the broadcast dims away).
class Product final : public Function {
 public:
  explicit Product(bool batched) : batched_(batched) {}
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    raw::check_float32("matmul", in);
    raw::check_same_device("matmul", in[0], in[1]);
    save_for_backward(in);
    return {multiply(in[0], in[1])};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    const Tensor& g = grads[0];
    const Tensor& a = saved_tensors()[0];
    const Tensor& b = saved_tensors()[1];
    return {needs_input_grad(0) ? multiply(g, matrices_transposed(b)) : Tensor(),
            needs_input_grad(1) ? multiply(matrices_transposed(a), g) : Tensor()};
  }
  std::string name() const override { return batched_ ? "BmmBackward" : "MatmulBackward"; }

 private:
  Tensor multiply(const Tensor& a, const Tensor& b) const {
    return batched_ ? raw::gemm_batched(a, b, precision_) : raw::gemm(a, b, {.precision = precision_});
  }

  bool batched_;
  Precision precision_ = default_precision();  // fixed when the product is recorded, for its backward too
};

Tensor matrix_product(const Tensor& a, const Tensor& b) { return apply_one(std::make_shared<Product>(false), {a, b}); }
Tensor batched_product(const Tensor& a, const Tensor& b) {
  return apply_one(std::make_shared<Product>(true), {a, b});
}

void check_inner_sizes(const char* op, const Tensor& a, const Tensor& b, int64_t a_inner, int64_t b_inner) {
  TANDEM_CHECK(a_inner == b_inner, op, ": shapes ", to_string(a.shape()), " and ", to_string(b.shape()),
               " cannot be multiplied (", a_inner, " != ", b_inner, ")");
}

// Both at least 3-D after the vectors' unit dims, or one of them: the batch dims broadcast, then one batched product.
Tensor broadcast_batched_product(const Tensor& a, const Tensor& b) {
  const Shape a_batch(a.shape().begin(), a.shape().end() - 2), b_batch(b.shape().begin(), b.shape().end() - 2);
  const size_t rank = std::max(a_batch.size(), b_batch.size());
  Shape batch(rank);
  for (size_t d = 0; d < rank; ++d) {
    const int64_t from_a = d < rank - a_batch.size() ? 1 : a_batch[d - (rank - a_batch.size())];
    const int64_t from_b = d < rank - b_batch.size() ? 1 : b_batch[d - (rank - b_batch.size())];
    TANDEM_CHECK(from_a == from_b || from_a == 1 || from_b == 1, "matmul: the batch dims of ", to_string(a.shape()),
                 " and ", to_string(b.shape()), " do not broadcast (", from_a, " and ", from_b, " at batch dim ", d,
                 ")");
    batch[d] = from_a == 1 ? from_b : from_a;
  }
  Shape a_shape = batch, b_shape = batch;
  a_shape.insert(a_shape.end(), {a.size(-2), a.size(-1)});
  b_shape.insert(b_shape.end(), {b.size(-2), b.size(-1)});
  return batched_product(a.expand(a_shape), b.expand(b_shape));
}

}  // namespace

// torch.matmul's cases: vector . vector; matrix @ matrix; a vector as a one-row (left) or one-column (right)
// matrix, its unit dim removed from the result; an N-D tensor @ a matrix (or vector) folded into one matrix product
// over all its rows; otherwise batched over the broadcast batch dims.
Tensor matmul(const Tensor& a, const Tensor& b) {
  raw::check_defined("matmul", a, "a");
  raw::check_defined("matmul", b, "b");
  TANDEM_CHECK(a.dim() >= 1 && b.dim() >= 1, "matmul: both arguments need at least 1 dimension, got shapes ",
               to_string(a.shape()), " and ", to_string(b.shape()));
  check_inner_sizes("matmul", a, b, a.size(-1), b.dim() == 1 ? b.size(0) : b.size(-2));
  if (a.dim() <= 2 && b.dim() <= 2) {
    const Tensor left = a.dim() == 1 ? a.unsqueeze(0) : a;
    const Tensor right = b.dim() == 1 ? b.unsqueeze(1) : b;
    Tensor product = matrix_product(left, right);
    if (b.dim() == 1) product = product.squeeze(1);
    if (a.dim() == 1) product = product.squeeze(0);
    return product;
  }
  if (b.dim() <= 2) {
    const Tensor right = b.dim() == 1 ? b.unsqueeze(1) : b;
    Shape shape(a.shape().begin(), a.shape().end() - 1);
    const int64_t rows = numel_of(shape);
    if (b.dim() == 2) shape.push_back(b.size(1));
    return matrix_product(a.reshape({rows, a.size(-1)}), right).reshape(shape);
  }
  const Tensor left = a.dim() == 1 ? a.unsqueeze(0) : a;
  const Tensor right = b.dim() == 1 ? b.unsqueeze(1) : b;
  Tensor product = broadcast_batched_product(left, right);
  if (a.dim() == 1) product = product.squeeze(-2);
  return product;
}

Tensor bmm(const Tensor& a, const Tensor& b) {
  raw::check_defined("bmm", a, "a");
  raw::check_defined("bmm", b, "b");
  TANDEM_CHECK(a.dim() == 3 && b.dim() == 3, "bmm: expected 3-D tensors, got shapes ", to_string(a.shape()), " and ",
               to_string(b.shape()));
  TANDEM_CHECK(a.size(0) == b.size(0), "bmm: batch sizes ", a.size(0), " and ", b.size(0), " differ (shapes ",
               to_string(a.shape()), " and ", to_string(b.shape()), ")");
  check_inner_sizes("bmm", a, b, a.size(2), b.size(1));
  return batched_product(a, b);
}

}  // namespace tandem
