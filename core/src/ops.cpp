// Differentiable arithmetic. Each op is an autograd::Function: forward computes with raw ops (no history),
// backward returns one gradient per input on that input's device.
#include "tandem/core/ops.h"

#include <cmath>

#include "raw_ops.h"
#include "tandem/core/autograd.h"
#include "tandem/core/error.h"
#include "tandem/core/matmul_settings.h"

namespace tandem {

using autograd::apply_one;
using autograd::Function;

namespace {

void check_matrix(const char* caller, const Tensor& t, const char* what) {
  raw::check_defined(caller, t, what);
  TANDEM_CHECK(t.dim() == 2, caller, ": ", what, " must be 2-D, got shape ", to_string(t.shape()));
}

// y = x W^T + b, or relu(x W^T + b): one GEMM with the bias (and the ReLU) in its epilogue, in the precision given
// (Note [Precision modes] in precision.h). W^T is a transposed view, never a copy.
//
// Note [Fused linear backward]: with fused_linear() (matmul_settings.h), one product, g^T x, gives the weight
// gradient and, in its epilogue, the bias gradient (the row sums of g^T), and the weight gradient is added straight
// into the weight's .grad where the engine allows it (Note [Gradients written in place] in
// core/src/autograd/engine.cpp), or written there when .grad is stale (Note [Stale gradients] in autograd.h), or
// else materialized for the weight's accumulator. The bias gradient is written straight into the bias's .grad when
// that is stale (after zero_grad, as in every training step: the product then writes both gradients into their
// places in a flat gradient buffer, and no copy follows), since the epilogue writes the sums and cannot add them;
// otherwise it is returned, and the bias's accumulator adds it. Without fused_linear() the weight gradient is a
// product of its own and the bias gradient a reduction of its own.
//
// Note [Linear in bfloat16]: in BFloat16, forward rounds x and W to bfloat16 once and keeps the rounded copies for
// backward (they are the only copies backward reads: half the memory of float32 activations), and backward rounds
// the incoming gradient g (after the ReLU's mask, when fused) once, so that every product has bfloat16 operands and
// float32 accumulation and output:
//   y = x16 W16^T + b,   dx = g16 W16,   dW = g16^T x16,   db = the row sums of g16^T (float32 sums).
// The master weight, its gradient and the bias stay float32; nothing is cached across calls, so a weight changed by
// an optimizer step is rounded afresh by the next forward.
//
// Note [Fused linear and ReLU]: linear_relu applies the ReLU in the epilogue of the forward product (cuBLASLt's
// RELU_BIAS on CUDA), saving the pass over the output that relu() takes. Backward masks g by the output's sign:
// y > 0 exactly where x W^T + b > 0 (y = max(z, 0)), so the output is all it keeps.
class Linear final : public Function {
 public:
  Linear(Precision precision, bool relu) : precision_(precision), relu_(relu) {}

  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    const char* op = relu_ ? "linear_relu" : "linear";
    const Tensor& x = in[0];
    const Tensor& w = in[1];
    const Tensor& b = in[2];
    check_matrix(op, x, "input");
    check_matrix(op, w, "weight");
    raw::check_float32(op, in);
    raw::check_same_device(op, x, w);
    TANDEM_CHECK(x.size(1) == w.size(1), op, ": input has shape ", to_string(x.shape()), " but weight has shape ",
                 to_string(w.shape()), " (expected input [*, ", w.size(1), "])");
    if (b.defined()) {
      raw::check_same_device(op, x, b);
      TANDEM_CHECK(b.dim() == 1 && b.size(0) == w.size(0), op, ": bias has shape ", to_string(b.shape()),
                   " but expected [", w.size(0), "]");
    }
    const Tensor x_in = raw::gemm_input(x, precision_);
    const Tensor w_in = raw::gemm_input(w, precision_);
    Tensor y = raw::gemm(x_in, w_in.t(), {.bias = b, .relu = relu_, .precision = precision_});
    save_for_backward({x_in, w_in, relu_ ? y : Tensor()});
    has_bias_ = b.defined();
    return {y};
  }

  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    const Tensor& x = saved_tensors()[0];
    const Tensor& w = saved_tensors()[1];
    const Tensor masked =
        relu_ ? raw::pointwise({backend::Pointwise::ReluBackward}, {grads[0], saved_tensors()[2]}, "linear_relu")
              : grads[0];
    const Tensor g = raw::gemm_input(masked, precision_);
    const bool bias_grad = has_bias_ && needs_input_grad(2);
    if (!fused_linear() || !needs_input_grad(1)) {
      return {needs_input_grad(0) ? raw::gemm(g, w, {.precision = precision_}) : Tensor(),
              needs_input_grad(1) ? raw::gemm(g.t(), x, {.precision = precision_}) : Tensor(),
              bias_grad ? raw::sum_dim(g.dtype() == DType::Float32 ? g : raw::convert(g, DType::Float32), 0, false)
                        : Tensor()};
    }
    // The input-gradient product goes with the weight-gradient product (Note [Paired small products] in
    // cuda/small_products.h): neither reads what the other writes.
    const Tensor grad_input = needs_input_grad(0) ? Tensor::empty({g.size(0), w.size(1)}, g.device()) : Tensor();
    const auto with_input_product = [&](const Tensor& a, const Tensor& b, const backend::GemmOptions& options,
                                        const Tensor& out) {
      if (grad_input.defined()) {
        raw::gemm_pair_into({.a = g, .b = w, .options = {.precision = precision_}, .out = grad_input},
                            {.a = a, .b = b, .options = options, .out = out});
      } else {
        raw::gemm_into(a, b, options, out);
      }
    };
    const auto shares_an_operand = [&](const Tensor& grad) {
      return grad.shares_storage_with(g) || grad.shares_storage_with(x);
    };
    // The weight-gradient product into `out` (added to it with `accumulate`), its row sums written straight over the
    // bias's stale .grad where the engine allows it, otherwise into grad_bias, which is then returned.
    Tensor grad_bias;
    const auto weight_product_into = [&](const Tensor& out, bool accumulate) {
      const bool bias_written =
          bias_grad && write_leaf_gradient(2, [&](const Tensor& grad, bool overwrite) {
            // The epilogue writes the sums: it cannot add them to what .grad holds.
            if (!overwrite || shares_an_operand(grad)) return false;
            with_input_product(g.t(), x, {.a_row_sums = grad, .accumulate = accumulate, .precision = precision_},
                               out);
            return true;
          });
      if (bias_written) return;
      if (bias_grad) grad_bias = Tensor::empty({g.size(1)}, g.device());
      with_input_product(g.t(), x, {.a_row_sums = grad_bias, .accumulate = accumulate, .precision = precision_}, out);
    };
    const bool written = write_leaf_gradient(1, [&](const Tensor& grad, bool overwrite) {
      if (shares_an_operand(grad)) return false;
      weight_product_into(grad, !overwrite);
      return true;
    });
    Tensor grad_weight;
    if (!written) {
      grad_weight = Tensor::empty({w.size(0), w.size(1)}, g.device());
      weight_product_into(grad_weight, false);
    }
    return {grad_input, grad_weight, grad_bias};
  }
  std::string name() const override { return relu_ ? "LinearReluBackward" : "LinearBackward"; }

 private:
  Precision precision_;
  bool relu_;
  bool has_bias_ = false;
};

// scale * sum(x) over all elements: sum (scale 1) and mean (scale 1/n).
class ScaledSum final : public Function {
 public:
  explicit ScaledSum(bool mean) : mean_(mean) {}
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    raw::check_defined(mean_ ? "mean" : "sum", in[0]);
    raw::check_float32(mean_ ? "mean" : "sum", in);
    shape_ = in[0].shape();
    scale_ = mean_ ? 1.0f / static_cast<float>(in[0].numel()) : 1.0f;
    if (mean_ && in[0].numel() == 0) return {Tensor::full({}, std::nanf(""), in[0].device())};
    return {raw::sum_all(in[0], scale_)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    return {raw::broadcast_scalar(grads[0], scale_, shape_)};
  }
  std::string name() const override { return mean_ ? "MeanBackward" : "SumBackward"; }

 private:
  bool mean_;
  float scale_ = 1.0f;
  Shape shape_;
};

class Cat final : public Function {
 public:
  explicit Cat(int64_t dim) : dim_(dim) {}
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    TANDEM_CHECK(!in.empty(), "cat: expected a non-empty list of tensors");
    for (size_t i = 0; i < in.size(); ++i) raw::check_defined("cat", in[i], "a tensor in the list");
    const Tensor& first = in[0];
    dim_ = wrap_dim(dim_, first.dim(), "cat");
    Shape out_shape = first.shape();
    out_shape[dim_] = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      raw::check_same_device("cat", first, in[i]);
      TANDEM_CHECK(in[i].dtype() == first.dtype(), "cat: got ", first.dtype(), " and ", in[i].dtype(),
                   "; expected one dtype (convert with ", raw::conversion_hint(first.dtype()), ")");
      TANDEM_CHECK(in[i].dim() == first.dim(), "cat: tensor ", i, " has ", in[i].dim(), " dimensions but expected ",
                   first.dim());
      for (int64_t d = 0; d < first.dim(); ++d)
        TANDEM_CHECK(d == dim_ || in[i].size(d) == first.size(d), "cat: tensor ", i, " has shape ",
                     to_string(in[i].shape()), " but expected size ", first.size(d), " at dimension ", d);
      sizes_.push_back(in[i].size(dim_));
      out_shape[dim_] += in[i].size(dim_);
    }
    Tensor out = Tensor::empty(out_shape, first.dtype(), first.device());  // any dtype: cat only copies
    int64_t start = 0;
    for (size_t i = 0; i < in.size(); ++i) {
      raw::copy(in[i], out.narrow(dim_, start, sizes_[i]));
      start += sizes_[i];
    }
    return {out};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    std::vector<Tensor> result;
    int64_t start = 0;
    for (int64_t size : sizes_) {
      result.push_back(grads[0].narrow(dim_, start, size));
      start += size;
    }
    return result;
  }
  std::string name() const override { return "CatBackward"; }

 private:
  int64_t dim_;
  std::vector<int64_t> sizes_;
};

class MseLoss final : public Function {
 public:
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    raw::check_defined("mse_loss", in[0], "input");
    raw::check_defined("mse_loss", in[1], "target");
    raw::check_float32("mse_loss", in);
    raw::check_same_device("mse_loss", in[0], in[1]);
    TANDEM_CHECK(in[0].shape() == in[1].shape(), "mse_loss: input has shape ", to_string(in[0].shape()),
                 " but target has shape ", to_string(in[1].shape()));
    save_for_backward(in);
    if (in[0].numel() == 0) return {Tensor::full({}, std::nanf(""), in[0].device())};
    return {raw::mse_forward(in[0], in[1])};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    const std::vector<Tensor>& in = saved_tensors();
    Tensor grad_input = raw::mse_backward(grads[0], in[0], in[1]);
    return {grad_input, needs_input_grad(1) ? raw::scale(grad_input, -1.0f) : Tensor()};
  }
  std::string name() const override { return "MseLossBackward"; }
};

}  // namespace

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias, std::optional<Precision> precision) {
  return apply_one(std::make_shared<Linear>(precision.value_or(default_precision()), false), {x, weight, bias});
}

Tensor linear_relu(const Tensor& x, const Tensor& weight, const Tensor& bias, std::optional<Precision> precision) {
  return apply_one(std::make_shared<Linear>(precision.value_or(default_precision()), true), {x, weight, bias});
}

Tensor sum(const Tensor& x) { return apply_one(std::make_shared<ScaledSum>(false), {x}); }
Tensor mean(const Tensor& x) { return apply_one(std::make_shared<ScaledSum>(true), {x}); }
Tensor sum(const Tensor& x, int64_t dim, bool keepdim) { return sum(x, std::vector<int64_t>{dim}, keepdim); }
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim) { return apply_one(std::make_shared<Cat>(dim), tensors); }
Tensor mse_loss(const Tensor& input, const Tensor& target) {
  return apply_one(std::make_shared<MseLoss>(), {input, target});
}

double max_abs_diff(const Tensor& a, const Tensor& b) {
  raw::check_defined("max_abs_diff", a);
  raw::check_defined("max_abs_diff", b);
  raw::check_float32("max_abs_diff", {a, b});
  TANDEM_CHECK(a.shape() == b.shape(), "max_abs_diff: shapes ", to_string(a.shape()), " and ", to_string(b.shape()),
               " differ");
  const std::vector<float> x = a.to_vector(), y = b.to_vector();
  double worst = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double diff = std::abs(static_cast<double>(x[i]) - y[i]);
    if (std::isnan(diff)) return diff;
    worst = std::max(worst, diff);
  }
  return worst;
}

bool allclose(const Tensor& a, const Tensor& b, double rtol, double atol) {
  raw::check_defined("allclose", a);
  raw::check_defined("allclose", b);
  raw::check_float32("allclose", {a, b});
  if (a.shape() != b.shape()) return false;
  const std::vector<float> x = a.to_vector(), y = b.to_vector();
  for (size_t i = 0; i < x.size(); ++i) {
    const double diff = std::abs(static_cast<double>(x[i]) - y[i]);
    if (!(diff <= atol + rtol * std::abs(static_cast<double>(y[i])))) return false;
  }
  return true;
}

}  // namespace tandem
