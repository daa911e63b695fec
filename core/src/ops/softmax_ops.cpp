// softmax and log_softmax along a dimension, with closed-form gradients.
#include "ops/raw_kernels.h"
#include "tandem/core/autograd.h"
#include "tandem/core/ops.h"

namespace tandem {

using autograd::Function;
using backend::Pointwise;

namespace {

// Note [Stable softmax]: with m the maximum along the dim, softmax = exp(x - m) / sum(exp(x - m)) and log_softmax =
// (x - m) - log(sum(exp(x - m))). Every exponent is <= 0, so nothing overflows, and x - m is exact for the inputs
// near the maximum that carry the result, which going through logsumexp(x) = m + log(sum) would round (by up to
// half an ulp of m, e.g. 5e-4 for inputs near 1e4).
struct Shifted {
  Tensor shifted_exp;  // exp(x - m)
  Tensor total;        // sum of shifted_exp along the dim, the dim kept
  Tensor max;          // m, the dim kept
};

Shifted shifted_exponentials(const char* name, const Tensor& x, int64_t dim) {
  raw::check_defined(name, x);
  const std::vector<int64_t> dims = {wrap_dim(dim, x.dim(), name)};
  const raw::Reduction plan = raw::plan_reduction(x, dims);
  Shifted result;
  result.max = plan.reduce == 0 ? Tensor::zeros(plan.kept_shape, x.device())
                                : raw::reduce(backend::ReduceOp::Max, plan, true, false).first;
  result.shifted_exp = raw::pointwise({Pointwise::ExpOfDifference}, {x, result.max}, name);
  result.total = raw::sum(raw::plan_reduction(result.shifted_exp, dims), true, 1.0f);
  return result;
}

// The sum along dim of t, the dim kept.
Tensor sum_along(const Tensor& t, int64_t dim) { return raw::sum(raw::plan_reduction(t, {dim}), true, 1.0f); }

class Softmax final : public Function {
 public:
  explicit Softmax(int64_t dim) : dim_(dim) {}
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    const Shifted s = shifted_exponentials("softmax", in[0], dim_);
    dim_ = wrap_dim(dim_, in[0].dim(), "softmax");
    Tensor y = raw::pointwise({Pointwise::Div}, {s.shifted_exp, s.total}, "softmax");
    save_for_backward({y});
    return {y};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    // dx = y * (g - sum(g * y))
    const Tensor& y = saved_tensors()[0];
    const Tensor dot = sum_along(raw::pointwise({Pointwise::ScaledMul, 1.0f}, {grads[0], y}, "softmax"), dim_);
    return {raw::pointwise({Pointwise::SoftmaxBackward}, {y, grads[0], dot}, "softmax")};
  }
  std::string name() const override { return "SoftmaxBackward"; }

 private:
  int64_t dim_;
};

class LogSoftmax final : public Function {
 public:
  explicit LogSoftmax(int64_t dim) : dim_(dim) {}
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    const Shifted s = shifted_exponentials("log_softmax", in[0], dim_);
    dim_ = wrap_dim(dim_, in[0].dim(), "log_softmax");
    const Tensor shifted = raw::pointwise({Pointwise::Sub}, {in[0], s.max}, "log_softmax");
    Tensor y = raw::pointwise({Pointwise::Sub}, {shifted, raw::pointwise({Pointwise::Log}, {s.total}, "log_softmax")},
                              "log_softmax");
    save_for_backward({y});
    return {y};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    // dx = g - exp(y) * sum(g)
    return {raw::pointwise({Pointwise::LogSoftmaxBackward}, {grads[0], saved_tensors()[0], sum_along(grads[0], dim_)},
                           "log_softmax")};
  }
  std::string name() const override { return "LogSoftmaxBackward"; }

 private:
  int64_t dim_;
};

}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return autograd::apply(std::make_shared<Softmax>(dim), {x})[0]; }
Tensor log_softmax(const Tensor& x, int64_t dim) {
  return autograd::apply(std::make_shared<LogSoftmax>(dim), {x})[0];
}

}  // namespace tandem
