// Differentiable reductions over dimensions: sum, mean, var, logsumexp, max / min (with indices), and argmax /
// argmin. Each plans its dimensions once (raw::plan_reduction) and reduces a contiguous [outer, reduce, inner] view.
#include <cmath>
#include <limits>
#include <utility>

#include "ops/raw_kernels.h"
#include "tandem/core/autograd.h"
#include "tandem/core/error.h"
#include "tandem/core/ops.h"

namespace tandem {

using autograd::apply_one;
using autograd::Function;
using backend::Pointwise;
using backend::ReduceOp;

namespace {

// The incoming gradient of a reduction seen with the reduced dims kept as size 1 (it broadcasts against the input).
Tensor kept(const Tensor& grad, const Shape& kept_shape) { return raw::reshaped(raw::contiguous(grad), kept_shape); }

// sum (scale 1) and mean (scale 1 / N) over dims.
class SumDims final : public Function {
 public:
  SumDims(std::vector<int64_t> dims, bool keepdim, bool mean)
      : dims_(std::move(dims)), keepdim_(keepdim), mean_(mean) {}
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    const char* name = mean_ ? "mean" : "sum";
    raw::check_defined(name, in[0]);
    const raw::Reduction plan = raw::plan_reduction(in[0], raw::reduction_dims(dims_, in[0].dim(), name));
    input_shape_ = in[0].shape();
    kept_shape_ = plan.kept_shape;
    scale_ = mean_ ? static_cast<float>(1.0 / static_cast<double>(plan.reduce)) : 1.0f;
    if (mean_ && plan.reduce == 0) return {Tensor::full(plan.shape(keepdim_), std::nanf(""), in[0].device())};
    return {raw::sum(plan, keepdim_, scale_)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    Tensor g = raw::expand(kept(grads[0], kept_shape_), input_shape_, "sum");
    return {scale_ == 1.0f ? g : raw::scale(g, scale_)};
  }
  std::string name() const override { return mean_ ? "MeanBackward" : "SumBackward"; }

 private:
  std::vector<int64_t> dims_;
  bool keepdim_, mean_;
  float scale_ = 1.0f;
  Shape input_shape_, kept_shape_;
};

// sum((x - mean)^2) / max(N - correction, 0), two passes over x.
class Variance final : public Function {
 public:
  Variance(std::vector<int64_t> dims, double correction, bool keepdim)
      : dims_(std::move(dims)), correction_(correction), keepdim_(keepdim) {}
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    const Tensor& x = in[0];
    raw::check_defined("var", x);
    TANDEM_CHECK(std::isfinite(correction_), "var: correction is ", correction_, " but expected a finite number");
    const std::vector<int64_t> dims = raw::reduction_dims(dims_, x.dim(), "var");
    const raw::Reduction plan = raw::plan_reduction(x, dims);
    const double n = static_cast<double>(plan.reduce);
    const Tensor mean = raw::sum(plan, true, static_cast<float>(1.0 / n));
    const Tensor squares = raw::pointwise({Pointwise::SquaredDifference}, {x, mean}, "var");
    const double divisor = std::max(n - correction_, 0.0);
    kept_shape_ = plan.kept_shape;
    gradient_scale_ = static_cast<float>(2.0 / divisor);
    save_for_backward({x, mean});
    return {raw::sum(raw::plan_reduction(squares, dims), keepdim_, static_cast<float>(1.0 / divisor))};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    return {raw::pointwise({Pointwise::ScaledDifferenceMul, gradient_scale_},
                           {kept(grads[0], kept_shape_), saved_tensors()[0], saved_tensors()[1]}, "var")};
  }
  std::string name() const override { return "VarBackward"; }

 private:
  std::vector<int64_t> dims_;
  double correction_;
  bool keepdim_;
  float gradient_scale_ = 0.0f;
  Shape kept_shape_;
};

class LogSumExp final : public Function {
 public:
  LogSumExp(std::vector<int64_t> dims, bool keepdim) : dims_(std::move(dims)), keepdim_(keepdim) {}
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    raw::check_defined("logsumexp", in[0]);
    const raw::Reduction plan = raw::plan_reduction(in[0], raw::reduction_dims(dims_, in[0].dim(), "logsumexp"));
    kept_shape_ = plan.kept_shape;
    Tensor result = plan.reduce == 0  // the log of an empty sum
                        ? Tensor::full(plan.kept_shape, -std::numeric_limits<float>::infinity(), in[0].device())
                        : raw::reduce(ReduceOp::LogSumExp, plan, true, false).first;
    save_for_backward({in[0], result});
    return {raw::reshaped(result, plan.shape(keepdim_))};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    // d/dx = softmax(x) = exp(x - logsumexp(x))
    const Tensor softmax = raw::pointwise({Pointwise::ExpOfDifference}, saved_tensors(), "logsumexp");
    return {raw::pointwise({Pointwise::ScaledMul, 1.0f}, {softmax, kept(grads[0], kept_shape_)}, "logsumexp")};
  }
  std::string name() const override { return "LogSumExpBackward"; }

 private:
  std::vector<int64_t> dims_;
  bool keepdim_;
  Shape kept_shape_;
};

const char* extreme_name(ReduceOp op) { return op == ReduceOp::Max ? "max" : "min"; }

// The planned reduction of x along `dim` for max / min / argmax / argmin, which refuse an empty dimension.
raw::Reduction plan_extreme(const char* name, const Tensor& x, int64_t dim) {
  raw::check_defined(name, x);
  const int64_t wrapped = wrap_dim(dim, x.dim(), name);
  TANDEM_CHECK(x.size(wrapped) > 0, name, ": cannot reduce over dimension ", dim, " of size 0 (shape ",
               to_string(x.shape()), ")");
  return raw::plan_reduction(x, {wrapped});
}

// max / min along one dim; the gradient goes to the index returned.
class ExtremeDim final : public Function {
 public:
  ExtremeDim(ReduceOp op, int64_t dim, bool keepdim) : op_(op), dim_(dim), keepdim_(keepdim) {}
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    const raw::Reduction plan = plan_extreme(extreme_name(op_), in[0], dim_);
    dim_ = wrap_dim(dim_, in[0].dim(), extreme_name(op_));
    input_shape_ = in[0].shape();
    auto [values, indices] = raw::reduce(op_, plan, true, true);
    save_for_backward({indices});
    indices_ = raw::reshaped(indices, plan.shape(keepdim_));
    return {raw::reshaped(values, plan.shape(keepdim_))};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    const Tensor& indices = saved_tensors()[0];
    return {raw::scatter_add(kept(grads[0], indices.shape()), dim_, indices, input_shape_, indices.device())};
  }
  std::string name() const override { return op_ == ReduceOp::Max ? "MaxBackward" : "MinBackward"; }
  Tensor take_indices() { return std::exchange(indices_, Tensor()); }

 private:
  ReduceOp op_;
  int64_t dim_;
  bool keepdim_;
  Shape input_shape_;
  Tensor indices_;  // handed to the caller once forward ran
};

// max / min over every element; the gradient is shared evenly by the elements equal to the result.
class ExtremeAll final : public Function {
 public:
  explicit ExtremeAll(ReduceOp op) : op_(op) {}
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    const char* name = extreme_name(op_);
    raw::check_defined(name, in[0]);
    TANDEM_CHECK(in[0].numel() > 0, name, ": cannot reduce a tensor of no elements (shape ", to_string(in[0].shape()),
                 ")");
    Tensor value = raw::reduce(op_, raw::plan_reduction(in[0], raw::reduction_dims({}, in[0].dim(), name)), false,
                               false).first;
    save_for_backward({in[0], value});
    return {value};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    const char* name = extreme_name(op_);
    const Tensor mask = raw::pointwise({Pointwise::SameValue}, saved_tensors(), name);
    const Tensor count = raw::sum_all(mask, 1.0f);
    return {raw::pointwise({Pointwise::MulDiv}, {mask, grads[0], count}, name)};
  }
  std::string name() const override { return op_ == ReduceOp::Max ? "MaxBackward" : "MinBackward"; }

 private:
  ReduceOp op_;
};

std::tuple<Tensor, Tensor> extreme(ReduceOp op, const Tensor& x, int64_t dim, bool keepdim) {
  auto function = std::make_shared<ExtremeDim>(op, dim, keepdim);
  Tensor values = apply_one(function, {x});
  return {values, function->take_indices()};
}

Tensor arg_extreme(ReduceOp op, const char* name, const Tensor& x, int64_t dim, bool keepdim) {
  return raw::reduce(op, plan_extreme(name, x, dim), keepdim, true).second;
}

Tensor arg_extreme_all(ReduceOp op, const char* name, const Tensor& x) {
  raw::check_defined(name, x);
  TANDEM_CHECK(x.numel() > 0, name, ": cannot reduce a tensor of no elements (shape ", to_string(x.shape()), ")");
  return raw::reduce(op, raw::plan_reduction(x, raw::reduction_dims({}, x.dim(), name)), false, true).second;
}

}  // namespace

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return apply_one(std::make_shared<SumDims>(dims, keepdim, false), {x});
}
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return apply_one(std::make_shared<SumDims>(dims, keepdim, true), {x});
}
Tensor var(const Tensor& x, const std::vector<int64_t>& dims, double correction, bool keepdim) {
  return apply_one(std::make_shared<Variance>(dims, correction, keepdim), {x});
}
Tensor var(const Tensor& x) { return var(x, {}); }
Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  return apply_one(std::make_shared<LogSumExp>(dims, keepdim), {x});
}

std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim) {
  return extreme(ReduceOp::Max, x, dim, keepdim);
}
std::tuple<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim) {
  return extreme(ReduceOp::Min, x, dim, keepdim);
}
Tensor max(const Tensor& x) { return apply_one(std::make_shared<ExtremeAll>(ReduceOp::Max), {x}); }
Tensor min(const Tensor& x) { return apply_one(std::make_shared<ExtremeAll>(ReduceOp::Min), {x}); }
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  return arg_extreme(ReduceOp::Max, "argmax", x, dim, keepdim);
}
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim) {
  return arg_extreme(ReduceOp::Min, "argmin", x, dim, keepdim);
}
Tensor argmax(const Tensor& x) { return arg_extreme_all(ReduceOp::Max, "argmax", x); }
Tensor argmin(const Tensor& x) { return arg_extreme_all(ReduceOp::Min, "argmin", x); }

}  // namespace tandem
