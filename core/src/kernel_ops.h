#pragma once
// The op tables that the CPU and CUDA backends share: every pointwise function as one functor compiled for the host
// and for the device (so both backends compute the same expression), and the reductions along one dimension.
// Included by backend.h; the functors are also compiled by nvcc (core/src/cuda/elementwise.cu).

#include <math.h>

#include <cstdint>

#include "tandem/core/host_device.h"

namespace tandem::backend {

// Pointwise functions of 1, 2 or 3 float32 operands with up to two float parameters p0, p1. Comparisons return
// 1.0f / 0.0f; a mask operand counts as true when it is non-zero. "Backward" entries take the incoming gradient g
// first and compute g * f'(.) from what the op saved (its input x or its output y).
enum class Pointwise : uint8_t {
  // f(x)
  Exp, Log, Sqrt, Rsqrt, Abs, Sigmoid, Tanh, Sin, Cos, GeluErf, GeluTanh,
  Relu,            // x < 0 ? 0 : x (NaN kept)
  Scale,           // p0 * x
  PowScalar,       // x^p0
  Clamp,           // min(max(x, p0), p1), NaN kept, p1 wins when p0 > p1 (as torch.clamp)
  Affine,          // p0 * x + p1
  ScalarOver,      // p0 / x
  // f(a, b)
  Add, Sub, Mul, Div, Pow, Eq, Ne, Lt, Le, Gt, Ge,
  Axpy,              // a + p0 * b (Tensor::add_'s y + alpha * x), each operation rounded
  SameValue,         // a == b, or both NaN
  SquaredDifference, // (a - b)^2
  ExpOfDifference,   // exp(a - b)
  ScaledMul,         // p0 * a * b
  MaskKeep,          // b != 0 ? a : 0
  MaskDrop,          // b != 0 ? 0 : a
  MaskFill,          // b != 0 ? p0 : a (masked_fill)
  ReluBackward,      // (g, x): x > 0 ? g : 0
  TanhBackward,      // (g, y): g (1 - y^2), each operation rounded
  SqrtBackward,      // (g, y): g / (2 y)
  RsqrtBackward,     // (g, y): -g y^3 / 2
  AbsBackward,       // (g, x): g * sign(x), 0 at 0
  SigmoidBackward,   // (g, y): g y (1 - y)
  GeluErfBackward,   // (g, x)
  GeluTanhBackward,  // (g, x)
  PowScalarBackward, // (g, x): g p0 x^(p0 - 1), 0 when p0 == 0
  ClampBackward,     // (g, x): g where p0 <= x <= p1, else 0
  ScalarOverBackward,// (g, x): -p0 g / x^2
  SinBackward,       // (g, x): g cos(x)
  CosBackward,       // (g, x): -g sin(x)
  // f(a, b, c)
  Where,                // a != 0 ? b : c
  PowBaseBackward,      // (g, a, b): g b a^(b - 1), 0 when b == 0
  PowExponentBackward,  // (g, a, b): g a^b log(a), 0 where a == 0 and b >= 0
  MulDiv,               // a * b / c
  SoftmaxBackward,      // (y, g, s): y (g - s), s = sum(g y) over the softmax dim
  LogSoftmaxBackward,   // (g, y, s): g - exp(y) s, s = sum(g) over the dim
  ScaledDifferenceMul,  // (g, x, m): p0 g (x - m)
};

struct PointwiseCall {
  Pointwise op;
  float p0 = 0.0f;
  float p1 = 0.0f;
};

// Reductions along one dimension of a contiguous [outer, reduce, inner] tensor (Backend::reduce_dim).
enum class ReduceOp : uint8_t {
  Max,        // values and the index of the first maximum; NaN is the maximum (its first occurrence wins)
  Min,        // likewise for the minimum
  LogSumExp,  // m + log(sum exp(x - m)) with m the maximum; +-inf when m is; NaN when any element is NaN
};

// The running maximum (kMax) or minimum of ReduceOp Max / Min and of LogSumExp's maximum, on both backends: NaN beats
// every number, and among equal values (or NaNs) the lower index wins.
template <bool kMax>
struct Extreme {
  float value;
  int64_t index;
  // Whether (v, i) beats the extreme so far.
  TANDEM_HOST_DEVICE bool beaten_by(float v, int64_t i) const {
    if (isnan(v)) return !isnan(value) || i < index;
    if (isnan(value)) return false;
    if (kMax ? v > value : v < value) return true;
    return v == value && i < index;
  }
  TANDEM_HOST_DEVICE void offer(float v, int64_t i) {
    if (beaten_by(v, i)) {
      value = v;
      index = i;
    }
  }
};

// Whether element (row, col) of a matrix lies in the triangle that tril(x, diagonal) (lower) or triu(x, diagonal)
// keeps: on or below (above) the diagonal `diagonal` places right of the main one (Backend::triangle_mask).
TANDEM_HOST_DEVICE inline bool in_triangle(int64_t row, int64_t col, int64_t diagonal, bool lower) {
  return lower ? col - row <= diagonal : col - row >= diagonal;
}

namespace fn {

constexpr float kSqrtHalf = 0.70710678118654752440f;      // 1 / sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;    // 1 / sqrt(2 pi)
constexpr float kSqrt2OverPi = 0.79788456080286535588f;   // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

// Note [Rounding like the CPU]: nvcc contracts a * b + c into one fused multiply-add, which rounds once where the CPU
// backend rounds twice (the x86-64 baseline that the host code is built for has no fused multiply-add). Where an
// expression's result must be bitwise the same on every device (the replicated training path applies the same update on
// each replica and relies on replicas staying bit-equal, whatever their devices), it is spelled with these: each
// operation rounded on its own on both sides (__fmul_rn and friends are never contracted). The CUDA optimizer updates
// (cuda/optimizer_updates.cu) and the CUDA-only elementwise kernels (cuda/elementwise.cu) follow the same rule with the
// intrinsics themselves.
TANDEM_HOST_DEVICE inline float add_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fadd_rn(a, b);
#else
  return a + b;
#endif
}
TANDEM_HOST_DEVICE inline float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}
TANDEM_HOST_DEVICE inline float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}

// clang-format off
struct Exp { static constexpr int kArity = 1; TANDEM_HOST_DEVICE float operator()(float x) const { return expf(x); } };
struct Log { static constexpr int kArity = 1; TANDEM_HOST_DEVICE float operator()(float x) const { return logf(x); } };
struct Abs { static constexpr int kArity = 1; TANDEM_HOST_DEVICE float operator()(float x) const { return fabsf(x); } };
// clang-format on
struct Sqrt {
  static constexpr int kArity = 1;
  TANDEM_HOST_DEVICE float operator()(float x) const { return sqrtf(x); }
};
struct Rsqrt {
  static constexpr int kArity = 1;
  TANDEM_HOST_DEVICE float operator()(float x) const { return 1.0f / sqrtf(x); }
};
struct Sigmoid {
  static constexpr int kArity = 1;
  TANDEM_HOST_DEVICE float operator()(float x) const { return 1.0f / (1.0f + expf(-x)); }
};
struct Tanh {
  static constexpr int kArity = 1;
  TANDEM_HOST_DEVICE float operator()(float x) const { return tanhf(x); }
};
struct Sin {
  static constexpr int kArity = 1;
  TANDEM_HOST_DEVICE float operator()(float x) const { return sinf(x); }
};
struct Cos {
  static constexpr int kArity = 1;
  TANDEM_HOST_DEVICE float operator()(float x) const { return cosf(x); }
};
struct Relu {
  static constexpr int kArity = 1;
  TANDEM_HOST_DEVICE float operator()(float x) const { return x < 0.0f ? 0.0f : x; }
};
struct Scale {
  static constexpr int kArity = 1;
  float s;
  TANDEM_HOST_DEVICE float operator()(float x) const { return s * x; }
};

struct GeluErf {
  static constexpr int kArity = 1;
  TANDEM_HOST_DEVICE float operator()(float x) const { return 0.5f * x * (1.0f + erff(x * kSqrtHalf)); }
};
struct GeluTanh {
  static constexpr int kArity = 1;
  TANDEM_HOST_DEVICE float operator()(float x) const {
    return 0.5f * x * (1.0f + tanhf(kSqrt2OverPi * (x + kGeluCubic * x * x * x)));
  }
};
struct PowScalar {
  static constexpr int kArity = 1;
  float p;
  TANDEM_HOST_DEVICE float operator()(float x) const { return p == 2.0f ? x * x : powf(x, p); }
};
struct Clamp {
  static constexpr int kArity = 1;
  float low, high;
  TANDEM_HOST_DEVICE float operator()(float x) const {
    const float r = x < low ? low : x;
    return r > high ? high : r;
  }
};
struct Affine {
  static constexpr int kArity = 1;
  float scale, shift;
  TANDEM_HOST_DEVICE float operator()(float x) const { return scale * x + shift; }
};
struct ScalarOver {
  static constexpr int kArity = 1;
  float s;
  TANDEM_HOST_DEVICE float operator()(float x) const { return s / x; }
};

struct Add {
  static constexpr int kArity = 2;
  TANDEM_HOST_DEVICE float operator()(float a, float b) const { return a + b; }
};
struct Sub {
  static constexpr int kArity = 2;
  TANDEM_HOST_DEVICE float operator()(float a, float b) const { return a - b; }
};
struct Mul {
  static constexpr int kArity = 2;
  TANDEM_HOST_DEVICE float operator()(float a, float b) const { return a * b; }
};
struct Axpy {
  static constexpr int kArity = 2;
  float alpha;
  TANDEM_HOST_DEVICE float operator()(float y, float x) const { return add_rn(y, mul_rn(alpha, x)); }
};
struct Div {
  static constexpr int kArity = 2;
  TANDEM_HOST_DEVICE float operator()(float a, float b) const { return a / b; }
};
struct Pow {
  static constexpr int kArity = 2;
  TANDEM_HOST_DEVICE float operator()(float a, float b) const { return powf(a, b); }
};
template <typename Compare>
struct Comparison {
  static constexpr int kArity = 2;
  TANDEM_HOST_DEVICE float operator()(float a, float b) const { return Compare{}(a, b) ? 1.0f : 0.0f; }
};
// clang-format off
struct EqualTo { TANDEM_HOST_DEVICE bool operator()(float a, float b) const { return a == b; } };
struct NotEqualTo { TANDEM_HOST_DEVICE bool operator()(float a, float b) const { return a != b; } };
struct Less { TANDEM_HOST_DEVICE bool operator()(float a, float b) const { return a < b; } };
struct LessEqual { TANDEM_HOST_DEVICE bool operator()(float a, float b) const { return a <= b; } };
struct Greater { TANDEM_HOST_DEVICE bool operator()(float a, float b) const { return a > b; } };
struct GreaterEqual { TANDEM_HOST_DEVICE bool operator()(float a, float b) const { return a >= b; } };
// clang-format on
struct SameValue {
  TANDEM_HOST_DEVICE bool operator()(float a, float b) const { return a == b || (isnan(a) && isnan(b)); }
};
struct SquaredDifference {
  static constexpr int kArity = 2;
  TANDEM_HOST_DEVICE float operator()(float a, float b) const {
    const float d = a - b;
    return d * d;
  }
};
struct ExpOfDifference {
  static constexpr int kArity = 2;
  TANDEM_HOST_DEVICE float operator()(float a, float b) const { return expf(a - b); }
};
struct ScaledMul {
  static constexpr int kArity = 2;
  float scale;
  TANDEM_HOST_DEVICE float operator()(float a, float b) const { return scale * a * b; }
};
struct MaskKeep {
  static constexpr int kArity = 2;
  TANDEM_HOST_DEVICE float operator()(float a, float mask) const { return mask != 0.0f ? a : 0.0f; }
};
struct MaskDrop {
  static constexpr int kArity = 2;
  TANDEM_HOST_DEVICE float operator()(float a, float mask) const { return mask != 0.0f ? 0.0f : a; }
};
struct MaskFill {
  static constexpr int kArity = 2;
  float value;
  TANDEM_HOST_DEVICE float operator()(float a, float mask) const { return mask != 0.0f ? value : a; }
};
struct ReluBackward {
  static constexpr int kArity = 2;
  TANDEM_HOST_DEVICE float operator()(float g, float x) const { return x > 0.0f ? g : 0.0f; }
};
struct TanhBackward {
  static constexpr int kArity = 2;
  TANDEM_HOST_DEVICE float operator()(float g, float y) const { return mul_rn(g, sub_rn(1.0f, mul_rn(y, y))); }
};
struct SqrtBackward {
  static constexpr int kArity = 2;
  TANDEM_HOST_DEVICE float operator()(float g, float y) const { return g / (2.0f * y); }
};
struct RsqrtBackward {
  static constexpr int kArity = 2;
  TANDEM_HOST_DEVICE float operator()(float g, float y) const { return -0.5f * g * y * y * y; }
};
struct AbsBackward {
  static constexpr int kArity = 2;
  TANDEM_HOST_DEVICE float operator()(float g, float x) const { return x > 0.0f ? g : (x < 0.0f ? -g : 0.0f * g); }
};
struct SigmoidBackward {
  static constexpr int kArity = 2;
  TANDEM_HOST_DEVICE float operator()(float g, float y) const { return g * y * (1.0f - y); }
};
struct GeluErfBackward {
  static constexpr int kArity = 2;
  TANDEM_HOST_DEVICE float operator()(float g, float x) const {
    const float cdf = 0.5f * (1.0f + erff(x * kSqrtHalf));
    const float pdf = kInvSqrt2Pi * expf(-0.5f * x * x);
    return g * (cdf + x * pdf);
  }
};
struct GeluTanhBackward {
  static constexpr int kArity = 2;
  TANDEM_HOST_DEVICE float operator()(float g, float x) const {
    const float t = tanhf(kSqrt2OverPi * (x + kGeluCubic * x * x * x));
    const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
    return g * (0.5f * (1.0f + t) + 0.5f * x * (1.0f - t * t) * du);
  }
};
struct PowScalarBackward {
  static constexpr int kArity = 2;
  float p;
  TANDEM_HOST_DEVICE float operator()(float g, float x) const {
    return p == 0.0f ? 0.0f : g * p * (p == 2.0f ? x : powf(x, p - 1.0f));
  }
};
struct ClampBackward {
  static constexpr int kArity = 2;
  float low, high;
  TANDEM_HOST_DEVICE float operator()(float g, float x) const { return x >= low && x <= high ? g : 0.0f; }
};
struct ScalarOverBackward {
  static constexpr int kArity = 2;
  float s;
  TANDEM_HOST_DEVICE float operator()(float g, float x) const { return -s * g / (x * x); }
};
struct SinBackward {
  static constexpr int kArity = 2;
  TANDEM_HOST_DEVICE float operator()(float g, float x) const { return g * cosf(x); }
};
struct CosBackward {
  static constexpr int kArity = 2;
  TANDEM_HOST_DEVICE float operator()(float g, float x) const { return -g * sinf(x); }
};

struct Where {
  static constexpr int kArity = 3;
  TANDEM_HOST_DEVICE float operator()(float c, float a, float b) const { return c != 0.0f ? a : b; }
};
struct PowBaseBackward {
  static constexpr int kArity = 3;
  TANDEM_HOST_DEVICE float operator()(float g, float a, float b) const {
    return b == 0.0f ? 0.0f : g * b * powf(a, b - 1.0f);
  }
};
struct PowExponentBackward {
  static constexpr int kArity = 3;
  TANDEM_HOST_DEVICE float operator()(float g, float a, float b) const {
    return a == 0.0f && b >= 0.0f ? 0.0f : g * powf(a, b) * logf(a);
  }
};
struct MulDiv {
  static constexpr int kArity = 3;
  TANDEM_HOST_DEVICE float operator()(float a, float b, float c) const { return a * b / c; }
};
struct SoftmaxBackward {
  static constexpr int kArity = 3;
  TANDEM_HOST_DEVICE float operator()(float y, float g, float s) const { return y * (g - s); }
};
struct LogSoftmaxBackward {
  static constexpr int kArity = 3;
  TANDEM_HOST_DEVICE float operator()(float g, float y, float s) const { return g - expf(y) * s; }
};
struct ScaledDifferenceMul {
  static constexpr int kArity = 3;
  float scale;
  TANDEM_HOST_DEVICE float operator()(float g, float x, float m) const { return scale * g * (x - m); }
};

}  // namespace fn

// Calls visit(functor) with the functor of `call` (its parameters bound) and returns what visit returns; each
// backend's visit launches its generic elementwise loop for that functor.
template <typename Visit>
decltype(auto) visit_pointwise(const PointwiseCall& call, Visit&& visit) {
  using P = Pointwise;
  switch (call.op) {
    case P::Exp: return visit(fn::Exp{});
    case P::Log: return visit(fn::Log{});
    case P::Sqrt: return visit(fn::Sqrt{});
    case P::Rsqrt: return visit(fn::Rsqrt{});
    case P::Abs: return visit(fn::Abs{});
    case P::Sigmoid: return visit(fn::Sigmoid{});
    case P::Tanh: return visit(fn::Tanh{});
    case P::Sin: return visit(fn::Sin{});
    case P::Cos: return visit(fn::Cos{});
    case P::GeluErf: return visit(fn::GeluErf{});
    case P::GeluTanh: return visit(fn::GeluTanh{});
    case P::Relu: return visit(fn::Relu{});
    case P::Scale: return visit(fn::Scale{call.p0});
    case P::PowScalar: return visit(fn::PowScalar{call.p0});
    case P::Clamp: return visit(fn::Clamp{call.p0, call.p1});
    case P::Affine: return visit(fn::Affine{call.p0, call.p1});
    case P::ScalarOver: return visit(fn::ScalarOver{call.p0});
    case P::Add: return visit(fn::Add{});
    case P::Sub: return visit(fn::Sub{});
    case P::Mul: return visit(fn::Mul{});
    case P::Div: return visit(fn::Div{});
    case P::Pow: return visit(fn::Pow{});
    case P::Eq: return visit(fn::Comparison<fn::EqualTo>{});
    case P::Ne: return visit(fn::Comparison<fn::NotEqualTo>{});
    case P::Lt: return visit(fn::Comparison<fn::Less>{});
    case P::Le: return visit(fn::Comparison<fn::LessEqual>{});
    case P::Gt: return visit(fn::Comparison<fn::Greater>{});
    case P::Ge: return visit(fn::Comparison<fn::GreaterEqual>{});
    case P::Axpy: return visit(fn::Axpy{call.p0});
    case P::SameValue: return visit(fn::Comparison<fn::SameValue>{});
    case P::SquaredDifference: return visit(fn::SquaredDifference{});
    case P::ExpOfDifference: return visit(fn::ExpOfDifference{});
    case P::ScaledMul: return visit(fn::ScaledMul{call.p0});
    case P::MaskKeep: return visit(fn::MaskKeep{});
    case P::MaskDrop: return visit(fn::MaskDrop{});
    case P::MaskFill: return visit(fn::MaskFill{call.p0});
    case P::ReluBackward: return visit(fn::ReluBackward{});
    case P::TanhBackward: return visit(fn::TanhBackward{});
    case P::SqrtBackward: return visit(fn::SqrtBackward{});
    case P::RsqrtBackward: return visit(fn::RsqrtBackward{});
    case P::AbsBackward: return visit(fn::AbsBackward{});
    case P::SigmoidBackward: return visit(fn::SigmoidBackward{});
    case P::GeluErfBackward: return visit(fn::GeluErfBackward{});
    case P::GeluTanhBackward: return visit(fn::GeluTanhBackward{});
    case P::PowScalarBackward: return visit(fn::PowScalarBackward{call.p0});
    case P::ClampBackward: return visit(fn::ClampBackward{call.p0, call.p1});
    case P::ScalarOverBackward: return visit(fn::ScalarOverBackward{call.p0});
    case P::SinBackward: return visit(fn::SinBackward{});
    case P::CosBackward: return visit(fn::CosBackward{});
    case P::Where: return visit(fn::Where{});
    case P::PowBaseBackward: return visit(fn::PowBaseBackward{});
    case P::PowExponentBackward: return visit(fn::PowExponentBackward{});
    case P::MulDiv: return visit(fn::MulDiv{});
    case P::SoftmaxBackward: return visit(fn::SoftmaxBackward{});
    case P::LogSoftmaxBackward: return visit(fn::LogSoftmaxBackward{});
    case P::ScaledDifferenceMul: return visit(fn::ScaledDifferenceMul{call.p0});
  }
  return visit(fn::Exp{});  // unreachable: every enumerator is handled above
}

// How many operands `op` reads.
inline int arity(Pointwise op) {
  return visit_pointwise(PointwiseCall{op}, [](auto f) { return decltype(f)::kArity; });
}

}  // namespace tandem::backend
