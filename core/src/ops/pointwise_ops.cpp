// Differentiable elementwise math, arithmetic with scalars and tensors, comparisons and where: each a pointwise
// functor of kernel_ops.h forward, and one (or a few) backward.
#include <cmath>
#include <limits>
#include <string>

#include "ops/raw_kernels.h"
#include "tandem/core/autograd.h"
#include "tandem/core/error.h"
#include "tandem/core/ops.h"

namespace tandem {

using autograd::apply_one;
using autograd::Function;
using backend::Pointwise;
using backend::PointwiseCall;

namespace {

// y = f(x), with backward g * f'(.) as one pointwise call on (g) or (g, saved), saved being x or y.
struct UnaryRule {
  const char* name;
  PointwiseCall forward;
  PointwiseCall backward;
  bool backward_needs_output;  // f' is a function of y (exp, sqrt, sigmoid) rather than of x
};

class UnaryMath final : public Function {
 public:
  explicit UnaryMath(const UnaryRule& rule) : rule_(rule) {}
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    Tensor out = raw::pointwise(rule_.forward, {in[0]}, rule_.name);
    if (backend::arity(rule_.backward.op) == 2) save_for_backward({rule_.backward_needs_output ? out : in[0]});
    return {out};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    if (backend::arity(rule_.backward.op) == 1) return {raw::pointwise(rule_.backward, {grads[0]}, rule_.name)};
    return {raw::pointwise(rule_.backward, {grads[0], saved_tensors()[0]}, rule_.name)};
  }
  std::string name() const override { return std::string(rule_.name) + "Backward"; }

 private:
  UnaryRule rule_;
};

Tensor unary(const UnaryRule& rule, const Tensor& x) { return apply_one(std::make_shared<UnaryMath>(rule), {x}); }

// p0 * x + p1 (every tensor-scalar + - * and neg): the gradient is p0 * g.
Tensor affine(const char* name, const Tensor& x, float scale, float shift) {
  return unary({name, {Pointwise::Affine, scale, shift}, {Pointwise::Affine, scale, 0.0f}, false}, x);
}

// a + b, a - b, a * b with broadcasting; backward reduces each gradient back to its input's shape.
class Binary final : public Function {
 public:
  Binary(Pointwise op, const char* name) : op_(op), name_(name) {}
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    a_shape_ = in[0].shape();
    b_shape_ = in[1].shape();
    if (op_ == Pointwise::Mul) save_for_backward(in);  // a + b and a - b need only the shapes
    return {raw::pointwise({op_}, in, name_)};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    const Tensor& g = grads[0];
    if (op_ == Pointwise::Add) return {raw::sum_to(g, a_shape_), raw::sum_to(g, b_shape_)};
    if (op_ == Pointwise::Sub) return {raw::sum_to(g, a_shape_), raw::sum_to(raw::scale(g, -1.0f), b_shape_)};
    const std::vector<Tensor>& in = saved_tensors();
    return {raw::sum_to(raw::pointwise({Pointwise::Mul}, {g, in[1]}, name_), a_shape_),
            raw::sum_to(raw::pointwise({Pointwise::Mul}, {g, in[0]}, name_), b_shape_)};
  }
  std::string name() const override { return name_; }

 private:
  Pointwise op_;  // Add, Sub or Mul
  const char* name_;
  Shape a_shape_, b_shape_;
};

// s * a (every tensor-scalar * and /, and -a): the gradient is s * g.
class Scale final : public Function {
 public:
  explicit Scale(float s) : s_(s) {}
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override { return {raw::scale(in[0], s_)}; }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override { return {raw::scale(grads[0], s_)}; }
  std::string name() const override { return "ScaleBackward"; }

 private:
  float s_;
};

class Divide final : public Function {
 public:
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    Tensor out = raw::pointwise({Pointwise::Div}, in, "div");
    a_shape_ = in[0].shape();
    save_for_backward({in[1], out});
    return {out};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    const Tensor& b = saved_tensors()[0];
    const Tensor& out = saved_tensors()[1];
    const Tensor g_over_b = raw::pointwise({Pointwise::Div}, {grads[0], b}, "div");
    return {needs_input_grad(0) ? raw::sum_to(g_over_b, a_shape_) : Tensor(),
            needs_input_grad(1) ? raw::sum_to(raw::pointwise({Pointwise::ScaledMul, -1.0f}, {g_over_b, out}, "div"),
                                              b.shape())
                                : Tensor()};
  }
  std::string name() const override { return "DivBackward"; }

 private:
  Shape a_shape_;
};

class Power final : public Function {
 public:
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    save_for_backward(in);
    return {raw::pointwise({Pointwise::Pow}, in, "pow")};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    const Tensor& a = saved_tensors()[0];
    const Tensor& b = saved_tensors()[1];
    return {needs_input_grad(0) ? raw::sum_to(raw::pointwise({Pointwise::PowBaseBackward}, {grads[0], a, b}, "pow"),
                                              a.shape())
                                : Tensor(),
            needs_input_grad(1)
                ? raw::sum_to(raw::pointwise({Pointwise::PowExponentBackward}, {grads[0], a, b}, "pow"), b.shape())
                : Tensor()};
  }
  std::string name() const override { return "PowBackward"; }
};

class Where final : public Function {
 public:
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    Tensor out = raw::pointwise({Pointwise::Where}, in, "where");
    save_for_backward({in[0]});
    a_shape_ = in[1].shape();
    b_shape_ = in[2].shape();
    return {out};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& grads) override {
    const Tensor& condition = saved_tensors()[0];
    return {Tensor(),
            needs_input_grad(1) ? raw::sum_to(raw::pointwise({Pointwise::MaskKeep}, {grads[0], condition}, "where"),
                                              a_shape_)
                                : Tensor(),
            needs_input_grad(2) ? raw::sum_to(raw::pointwise({Pointwise::MaskDrop}, {grads[0], condition}, "where"),
                                              b_shape_)
                                : Tensor()};
  }
  std::string name() const override { return "WhereBackward"; }

 private:
  Shape a_shape_, b_shape_;
};

Tensor compare(Pointwise op, const char* name, const Tensor& a, const Tensor& b) {
  return raw::pointwise({op}, {a, b}, name);  // a mask: no history
}

Tensor compare(Pointwise op, const char* name, const Tensor& a, float b) {
  raw::check_defined(name, a);
  return compare(op, name, a, Tensor::scalar(b, a.device()));
}

}  // namespace

Tensor operator+(const Tensor& a, const Tensor& b) {
  return apply_one(std::make_shared<Binary>(Pointwise::Add, "add"), {a, b});
}
Tensor operator-(const Tensor& a, const Tensor& b) {
  return apply_one(std::make_shared<Binary>(Pointwise::Sub, "sub"), {a, b});
}
Tensor operator*(const Tensor& a, const Tensor& b) {
  return apply_one(std::make_shared<Binary>(Pointwise::Mul, "mul"), {a, b});
}
Tensor operator*(const Tensor& a, float s) { return apply_one(std::make_shared<Scale>(s), {a}); }
Tensor operator*(float s, const Tensor& a) { return a * s; }
Tensor operator/(const Tensor& a, float s) { return a * (1.0f / s); }
Tensor operator-(const Tensor& a) { return a * -1.0f; }

Tensor relu(const Tensor& x) { return unary({"relu", {Pointwise::Relu}, {Pointwise::ReluBackward}, false}, x); }
Tensor tanh(const Tensor& x) { return unary({"tanh", {Pointwise::Tanh}, {Pointwise::TanhBackward}, true}, x); }
Tensor sin(const Tensor& x) { return unary({"sin", {Pointwise::Sin}, {Pointwise::SinBackward}, false}, x); }
Tensor cos(const Tensor& x) { return unary({"cos", {Pointwise::Cos}, {Pointwise::CosBackward}, false}, x); }
Tensor exp(const Tensor& x) { return unary({"exp", {Pointwise::Exp}, {Pointwise::ScaledMul, 1.0f}, true}, x); }
Tensor log(const Tensor& x) { return unary({"log", {Pointwise::Log}, {Pointwise::Div}, false}, x); }
Tensor sqrt(const Tensor& x) { return unary({"sqrt", {Pointwise::Sqrt}, {Pointwise::SqrtBackward}, true}, x); }
Tensor rsqrt(const Tensor& x) { return unary({"rsqrt", {Pointwise::Rsqrt}, {Pointwise::RsqrtBackward}, true}, x); }
Tensor abs(const Tensor& x) { return unary({"abs", {Pointwise::Abs}, {Pointwise::AbsBackward}, false}, x); }
Tensor sigmoid(const Tensor& x) {
  return unary({"sigmoid", {Pointwise::Sigmoid}, {Pointwise::SigmoidBackward}, true}, x);
}
Tensor pow(const Tensor& x, float exponent) {
  return unary({"pow", {Pointwise::PowScalar, exponent}, {Pointwise::PowScalarBackward, exponent}, false}, x);
}
Tensor pow(const Tensor& base, const Tensor& exponent) {
  return apply_one(std::make_shared<Power>(), {base, exponent});
}
Tensor neg(const Tensor& x) { return affine("neg", x, -1.0f, 0.0f); }

Tensor gelu(const Tensor& x, std::string_view approximate) {
  if (approximate == "none")
    return unary({"gelu", {Pointwise::GeluErf}, {Pointwise::GeluErfBackward}, false}, x);
  TANDEM_CHECK(approximate == "tanh", "gelu: approximate is ", excerpt(approximate),
               " but expected \"none\" or \"tanh\"");
  return unary({"gelu", {Pointwise::GeluTanh}, {Pointwise::GeluTanhBackward}, false}, x);
}

Tensor clamp(const Tensor& x, float min, float max) {
  TANDEM_CHECK(!std::isnan(min) && !std::isnan(max), "clamp: bounds ", min, " and ", max, " must not be NaN");
  return unary({"clamp", {Pointwise::Clamp, min, max}, {Pointwise::ClampBackward, min, max}, false}, x);
}
Tensor clamp_min(const Tensor& x, float min) { return clamp(x, min, std::numeric_limits<float>::infinity()); }
Tensor clamp_max(const Tensor& x, float max) { return clamp(x, -std::numeric_limits<float>::infinity(), max); }

Tensor operator/(const Tensor& a, const Tensor& b) {
  return apply_one(std::make_shared<Divide>(), {a, b});
}
Tensor operator+(const Tensor& a, float s) { return affine("add", a, 1.0f, s); }
Tensor operator+(float s, const Tensor& a) { return affine("add", a, 1.0f, s); }
Tensor operator-(const Tensor& a, float s) { return affine("sub", a, 1.0f, -s); }
Tensor operator-(float s, const Tensor& a) { return affine("sub", a, -1.0f, s); }
Tensor operator/(float s, const Tensor& a) {
  return unary({"div", {Pointwise::ScalarOver, s}, {Pointwise::ScalarOverBackward, s}, false}, a);
}

Tensor eq(const Tensor& a, const Tensor& b) { return compare(Pointwise::Eq, "eq", a, b); }
Tensor ne(const Tensor& a, const Tensor& b) { return compare(Pointwise::Ne, "ne", a, b); }
Tensor lt(const Tensor& a, const Tensor& b) { return compare(Pointwise::Lt, "lt", a, b); }
Tensor le(const Tensor& a, const Tensor& b) { return compare(Pointwise::Le, "le", a, b); }
Tensor gt(const Tensor& a, const Tensor& b) { return compare(Pointwise::Gt, "gt", a, b); }
Tensor ge(const Tensor& a, const Tensor& b) { return compare(Pointwise::Ge, "ge", a, b); }
Tensor eq(const Tensor& a, float b) { return compare(Pointwise::Eq, "eq", a, b); }
Tensor ne(const Tensor& a, float b) { return compare(Pointwise::Ne, "ne", a, b); }
Tensor lt(const Tensor& a, float b) { return compare(Pointwise::Lt, "lt", a, b); }
Tensor le(const Tensor& a, float b) { return compare(Pointwise::Le, "le", a, b); }
Tensor gt(const Tensor& a, float b) { return compare(Pointwise::Gt, "gt", a, b); }
Tensor ge(const Tensor& a, float b) { return compare(Pointwise::Ge, "ge", a, b); }
Tensor operator<(const Tensor& a, const Tensor& b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, const Tensor& b) { return le(a, b); }
Tensor operator>(const Tensor& a, const Tensor& b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, const Tensor& b) { return ge(a, b); }
Tensor operator<(const Tensor& a, float b) { return lt(a, b); }
Tensor operator<=(const Tensor& a, float b) { return le(a, b); }
Tensor operator>(const Tensor& a, float b) { return gt(a, b); }
Tensor operator>=(const Tensor& a, float b) { return ge(a, b); }

Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b) {
  return apply_one(std::make_shared<Where>(), {condition, a, b});
}

}  // namespace tandem
