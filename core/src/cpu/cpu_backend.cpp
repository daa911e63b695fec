// The CPU backend: Eigen for GEMM and vectorizable array work, strided row loops for everything that may be
// broadcast or non-contiguous. Single-threaded; reductions accumulate in double.

#include <Eigen/Core>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend.h"
#include "cpu/attention.h"
#include "cpu/convert.h"
#include "cpu/elementwise.h"
#include "cpu/image_kernels.h"
#include "cpu/layer_norm.h"
#include "cpu/strided_loop.h"
#include "tandem/core/error.h"

namespace tandem::backend {
namespace {

using Eigen::Dynamic;
using RowMajorMatrix = Eigen::Matrix<float, Dynamic, Dynamic, Eigen::RowMajor>;
using ColMajorMatrix = Eigen::Matrix<float, Dynamic, Dynamic, Eigen::ColMajor>;
using ConstArray = Eigen::Map<const Eigen::ArrayXf>;
using MutableArray = Eigen::Map<Eigen::ArrayXf>;

ConstArray array_of(const Tensor& t) { return ConstArray(t.data(), t.numel()); }
MutableArray mutable_array_of(const Tensor& t) { return MutableArray(t.mutable_data(), t.numel()); }

// Calls fn with an Eigen map of the 2-D tensor t in its natural storage order (row-major when stride(1) == 1,
// column-major when stride(0) == 1), so that Eigen's GEMM reads it in place. Any other layout (e.g. a stride-0
// broadcast along a dimension of size > 1) is packed into `packed` first.
template <typename Fn>
void with_matrix(const Tensor& t, std::vector<float>& packed, Fn&& fn) {
  const int64_t rows = t.size(0), cols = t.size(1);
  const int64_t row_stride = t.strides()[0], col_stride = t.strides()[1];
  if (col_stride == 1 || cols <= 1) {
    fn(Eigen::Map<const RowMajorMatrix, 0, Eigen::OuterStride<>>(t.data(), rows, cols,
                                                                  Eigen::OuterStride<>(rows <= 1 ? cols : row_stride)));
  } else if (row_stride == 1 || rows <= 1) {
    fn(Eigen::Map<const ColMajorMatrix, 0, Eigen::OuterStride<>>(t.data(), rows, cols,
                                                                  Eigen::OuterStride<>(col_stride)));
  } else {
    packed.resize(static_cast<size_t>(rows * cols));
    const float* src = t.data();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) packed[r * cols + c] = src[r * row_stride + c * col_stride];
    fn(Eigen::Map<const RowMajorMatrix, 0, Eigen::OuterStride<>>(packed.data(), rows, cols,
                                                                  Eigen::OuterStride<>(cols)));
  }
}

// result = a @ b, for 2-D a and b with k > 0.
template <typename Result>
void multiply(const Tensor& a, const Tensor& b, Result& result) {
  std::vector<float> packed_a, packed_b;
  with_matrix(a, packed_a, [&](const auto& lhs) {
    with_matrix(b, packed_b, [&](const auto& rhs) { result.noalias() = lhs * rhs; });
  });
}

// sums[i] = the sum of a's row i, accumulated in double over k in order: the values sum_dim gives for the same
// numbers (Note [sum_dim layout]), whatever a's strides.
void sum_rows(const Tensor& a, const Tensor& sums) {
  const int64_t m = a.size(0), k = a.size(1);
  const int64_t row_stride = a.strides()[0], col_stride = a.strides()[1];
  const float* pa = a.data();
  std::vector<double> acc(static_cast<size_t>(m), 0.0);
  if (col_stride <= row_stride) {  // rows lie along memory: one row at a time
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < k; ++j) acc[i] += pa[i * row_stride + j * col_stride];
  } else {  // columns lie along memory (a transposed view): one column at a time, into every row's sum
    for (int64_t j = 0; j < k; ++j)
      for (int64_t i = 0; i < m; ++i) acc[i] += pa[i * row_stride + j * col_stride];
  }
  float* out = sums.mutable_data();
  for (int64_t i = 0; i < m; ++i) out[i] = static_cast<float>(acc[i]);
}

// x rounded to TF32's 10 mantissa bits, to nearest with ties to even (Note [bfloat16 rounding] in bfloat16.h does
// the same at 7 bits); NaN and infinities are kept.
float round_to_tf32(float x) {
  uint32_t bits;
  std::memcpy(&bits, &x, sizeof(bits));
  if ((bits & 0x7F800000u) == 0x7F800000u) return x;
  bits += 0xFFFu + ((bits >> 13) & 1u);
  bits &= ~uint32_t{0x1FFF};
  float rounded;
  std::memcpy(&rounded, &bits, sizeof(rounded));
  return rounded;
}

// A float32 operand of a product in `precision`, of t's shape: bfloat16 operands converted (exactly), TF32 ones
// rounded, float32 ones as they are.
Tensor float32_operand(const Tensor& t, Precision precision) {
  if (t.dtype() == DType::BFloat16) {
    Tensor wide = Tensor::empty(t.shape(), DType::Float32, t.device());
    cpu::convert(t, wide);
    return wide;
  }
  if (precision != Precision::TF32) return t;
  Tensor rounded = Tensor::empty(t.shape(), DType::Float32, t.device());
  cpu::convert(t, rounded);  // a contiguous copy
  float* values = rounded.mutable_data();
  for (int64_t i = 0; i < rounded.numel(); ++i) values[i] = round_to_tf32(values[i]);
  return rounded;
}

double sum_of(const float* x, int64_t n) {
  double total = 0.0;
  for (int64_t i = 0; i < n; ++i) total += x[i];
  return total;
}

class CpuBackend final : public Backend {
 public:
  void fill(const Tensor& out, float value) override {
    float* po = out.mutable_data();
    cpu::for_each_row<1>(out.shape(), {&out.strides()},
                         [&](int64_t length, const cpu::Offsets<1>& at, const cpu::Offsets<1>& step) {
                           if (step[0] == 1) {
                             std::fill_n(po + at[0], length, value);
                           } else {
                             for (int64_t i = 0; i < length; ++i) po[at[0] + i * step[0]] = value;
                           }
                         });
  }

  void fill_bits(const Tensor& out, uint64_t bits) override { cpu::fill_bits(out, bits); }

  void triangle_mask(int64_t diagonal, bool lower, const Tensor& out) override {
    const int64_t rows = out.size(0), cols = out.size(1);
    float* po = out.mutable_data();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t c = 0; c < cols; ++c) po[r * cols + c] = backend::in_triangle(r, c, diagonal, lower) ? 1.0f : 0.0f;
  }

  void copy(const Tensor& src, const Tensor& dst) override {
    if (src.dtype() != DType::Float32 || dst.dtype() != DType::Float32) return cpu::convert(src, dst);
    const float* ps = src.data();
    float* pd = dst.mutable_data();
    if (ps == pd && src.strides() == dst.strides()) return;
    cpu::for_each_row<2>(dst.shape(), {&dst.strides(), &src.strides()},
                         [&](int64_t length, const cpu::Offsets<2>& at, const cpu::Offsets<2>& step) {
                           if (step[0] == 1 && step[1] == 1) {
                             std::memmove(pd + at[0], ps + at[1], static_cast<size_t>(length) * sizeof(float));
                           } else {
                             for (int64_t i = 0; i < length; ++i) pd[at[0] + i * step[0]] = ps[at[1] + i * step[1]];
                           }
                         });
  }

  void gemm(const Tensor& a, const Tensor& b, const GemmOptions& options, const Tensor& out) override {
    const int64_t m = a.size(0), k = a.size(1), n = b.size(1);
    // Note [Precision modes] in precision.h: the CPU rounds the inputs and multiplies in float32.
    const Tensor lhs = float32_operand(a, options.precision);
    const Tensor rhs = float32_operand(b, options.precision);
    if (options.a_row_sums.defined()) sum_rows(a.dtype() == DType::BFloat16 ? lhs : a, options.a_row_sums);
    if (m == 0 || n == 0) return;
    Eigen::Map<RowMajorMatrix> result(out.mutable_data(), m, n);
    if (options.accumulate) {
      if (k == 0) return;
      // The product is materialized and then added, so that accumulating gives the values that adding a product
      // computed on its own gives (Eigen would otherwise add each block of k into out as it goes).
      std::vector<float> values(static_cast<size_t>(m * n));
      Eigen::Map<RowMajorMatrix> product(values.data(), m, n);
      multiply(lhs, rhs, product);
      result += product;
      return;
    }
    if (k == 0) {
      result.setZero();
    } else {
      multiply(lhs, rhs, result);
    }
    if (options.bias.defined()) {
      result.rowwise() += Eigen::Map<const Eigen::RowVectorXf>(options.bias.data(), n);
    }
    if (options.relu) result = result.unaryExpr([](float v) { return v < 0.0f ? 0.0f : v; });
  }

  // Note [sum_dim layout]: x is contiguous, so it is [outer, reduce, inner] in memory; each output row of `inner`
  // sums is accumulated in double over the `reduce` input rows, which reads x once, in order.
  void sum_dim(const Tensor& x, int64_t dim, const Tensor& out) override {
    const Shape& shape = x.shape();
    int64_t outer = 1, inner = 1;
    for (int64_t d = 0; d < dim; ++d) outer *= shape[d];
    for (int64_t d = dim + 1; d < static_cast<int64_t>(shape.size()); ++d) inner *= shape[d];
    const int64_t reduce = shape[dim];
    const float* px = x.data();
    float* po = out.mutable_data();
    std::vector<double> acc(static_cast<size_t>(inner));
    for (int64_t o = 0; o < outer; ++o) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t r = 0; r < reduce; ++r) {
        const float* row = px + (o * reduce + r) * inner;
        for (int64_t i = 0; i < inner; ++i) acc[i] += row[i];
      }
      for (int64_t i = 0; i < inner; ++i) po[o * inner + i] = static_cast<float>(acc[i]);
    }
  }

  void sum_all(const Tensor& x, float scale, const Tensor& out) override {
    out.mutable_data()[0] = static_cast<float>(sum_of(x.data(), x.numel()) * scale);
  }

  void broadcast_scalar(const Tensor& scalar, float scale, const Tensor& out) override {
    const float value = scalar.data()[0] * scale;
    std::fill_n(out.mutable_data(), out.numel(), value);
  }

  void mse_forward(const Tensor& input, const Tensor& target, const Tensor& out) override {
    const float* pi = input.data();
    const float* pt = target.data();
    const int64_t n = input.numel();
    double total = 0.0;
    for (int64_t i = 0; i < n; ++i) {
      const double diff = static_cast<double>(pi[i]) - pt[i];
      total += diff * diff;
    }
    out.mutable_data()[0] = static_cast<float>(total / static_cast<double>(n));  // n == 0: NaN, like torch
  }

  void mse_backward(const Tensor& grad, const Tensor& input, const Tensor& target,
                    const Tensor& grad_input) override {
    const float factor = static_cast<float>(2.0 * grad.data()[0] / static_cast<double>(input.numel()));
    mutable_array_of(grad_input) = factor * (array_of(input) - array_of(target));
  }

  void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer, const SgdUpdate& given,
                  const Tensor& lr) override {
    SgdUpdate update = given;
    if (lr.defined()) update.lr = lr.data()[0];
    float* p = param.mutable_data();
    const float* g = grad.data();
    float* buf = update.momentum != 0.0f ? momentum_buffer.mutable_data() : nullptr;
    const int64_t n = param.numel();
    for (int64_t i = 0; i < n; ++i) {
      float d = g[i];
      if (update.weight_decay != 0.0f) d += update.weight_decay * p[i];
      if (buf != nullptr) {
        buf[i] = update.first_step ? d : update.momentum * buf[i] + (1.0f - update.dampening) * d;
        d = update.nesterov ? d + update.momentum * buf[i] : buf[i];
      }
      p[i] -= update.lr * d;
    }
  }

  void adam_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                   const Tensor& max_exp_avg_sq, const AdamUpdate& given, const Tensor& step_factors) override {
    AdamUpdate u = given;
    if (step_factors.defined()) {
      u.param_scale = step_factors.data()[0];
      u.step_size = step_factors.data()[1];
      u.bias_correction2_sqrt = step_factors.data()[2];
    }
    float* p = param.mutable_data();
    const float* g = grad.data();
    float* m = exp_avg.mutable_data();
    float* v = exp_avg_sq.mutable_data();
    float* v_max = u.amsgrad ? max_exp_avg_sq.mutable_data() : nullptr;
    const bool small_weight = std::abs(u.one_minus_beta1) < 0.5f;  // torch.lerp's choice of form
    const int64_t n = param.numel();
    for (int64_t i = 0; i < n; ++i) {
      const float scaled = p[i] * u.param_scale;
      float d = g[i];
      if (u.weight_decay != 0.0f) d += u.weight_decay * scaled;
      m[i] = small_weight ? m[i] + u.one_minus_beta1 * (d - m[i]) : d - (d - m[i]) * (1.0f - u.one_minus_beta1);
      v[i] = v[i] * u.beta2 + u.one_minus_beta2 * d * d;
      float second = v[i];
      if (v_max != nullptr) {
        if (second > v_max[i] || std::isnan(second)) v_max[i] = second;  // NaN in either stays NaN
        second = v_max[i];
      }
      const float denom = std::sqrt(second) / u.bias_correction2_sqrt + u.eps;
      p[i] = scaled + (-u.step_size * m[i]) / denom;
    }
  }

  // CPU work is done when the call returns: there is no stream to choose.
  void sgd_update(const std::vector<SgdParameter>& parameters, UpdateStream) override {
    for (const SgdParameter& p : parameters) sgd_update(p.param, p.grad, p.momentum_buffer, p.update, p.lr);
  }

  void adam_update(const std::vector<AdamParameter>& parameters, UpdateStream) override {
    for (const AdamParameter& p : parameters) {
      adam_update(p.param, p.grad, p.exp_avg, p.exp_avg_sq, p.max_exp_avg_sq, p.update, p.step_factors);
    }
  }

  void vector_norm(const Tensor& x, double ord, const Tensor& out) override {
    const float* px = x.data();
    const int64_t n = x.numel();
    double result = 0.0;
    if (std::isinf(ord)) {
      for (int64_t i = 0; i < n && !std::isnan(result); ++i) {
        const double magnitude = std::abs(px[i]);
        result = std::isnan(magnitude) ? magnitude : std::max(result, magnitude);  // NaN wins, as in torch.amax
      }
    } else if (ord == 2.0) {
      for (int64_t i = 0; i < n; ++i) result += static_cast<double>(px[i]) * px[i];
      result = std::sqrt(result);
    } else if (ord == 1.0) {
      for (int64_t i = 0; i < n; ++i) result += std::abs(static_cast<double>(px[i]));
    } else {
      for (int64_t i = 0; i < n; ++i) result += std::pow(std::abs(static_cast<double>(px[i])), ord);
      result = std::pow(result, 1.0 / ord);
    }
    out.mutable_data()[0] = static_cast<float>(result);
  }

  void apply_dropout(const Tensor& x, const detail::DropoutMask& mask, const Tensor& out) override {
    const detail::DropoutMask drawn = mask.resolved();
    const float* in = x.data();
    float* result = out.mutable_data();
    for (int64_t i = 0; i < x.numel(); ++i) result[i] = in[i] * drawn.factor(static_cast<uint64_t>(i));
  }

  void clip_by_norm(const Tensor& x, const Tensor& norm, float max_norm) override {
    // As PyTorch evaluates max_norm / (norm + 1e-6): the reciprocal times max_norm, then clamped to at most 1.
    float factor = (1.0f / (norm.data()[0] + 1e-6f)) * max_norm;
    if (factor > 1.0f) factor = 1.0f;  // NaN stays NaN
    mutable_array_of(x) *= factor;
  }

  void to_host(const Tensor& src, void* host) override {
    if (src.numel() > 0) std::memcpy(host, src.data_ptr(), nbytes_of(src));
  }

  void from_host(const void* host, const Tensor& dst) override {
    if (dst.numel() > 0) std::memcpy(dst.mutable_data_ptr(), host, nbytes_of(dst));
  }

  void pointwise(const PointwiseCall& call, const std::vector<Tensor>& inputs, const Tensor& out) override {
    cpu::pointwise(call, inputs, out);
  }
  void reduce_dim(ReduceOp op, const Tensor& x, int64_t outer, int64_t reduce, int64_t inner, const Tensor& values,
                  const Tensor& indices) override {
    cpu::reduce_dim(op, x, outer, reduce, inner, values, indices);
  }
  void gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) override {
    cpu::gather(x, dim, index, out);
  }
  void scatter_add(const Tensor& src, int64_t dim, const Tensor& index, const Tensor& target) override {
    cpu::scatter_add(src, dim, index, target);
  }
  void attention_forward(const AttentionCall& call, const Tensor& out, const Tensor& lse) override {
    cpu::attention_forward(call, out, lse);
  }
  void attention_backward(const AttentionCall& call, const Tensor& out, const Tensor& grad_out, const Tensor& lse,
                          const Tensor& grad_q, const Tensor& grad_k, const Tensor& grad_v) override {
    cpu::attention_backward(call, out, grad_out, lse, grad_q, grad_k, grad_v);
  }
  void layer_norm_forward(const LayerNormCall& call, const Tensor& out, const Tensor& mean,
                          const Tensor& rstd) override {
    cpu::layer_norm_forward(call, out, mean, rstd);
  }
  void layer_norm_backward(const LayerNormCall& call, const Tensor& grad_out, const Tensor& mean, const Tensor& rstd,
                           const Tensor& grad_x, const Tensor& grad_weight, const Tensor& grad_bias) override {
    cpu::layer_norm_backward(call, grad_out, mean, rstd, grad_x, grad_weight, grad_bias);
  }
  void im2col(const Tensor& input, const Conv2dWindows& windows, const Tensor& cols) override {
    cpu::im2col(input, windows, cols);
  }
  void col2im(const Tensor& cols, const Conv2dWindows& windows, const Tensor& grad_input) override {
    cpu::col2im(cols, windows, grad_input);
  }
  void max_pool2d(const Tensor& input, const Pool2dWindows& windows, const Tensor& out,
                  const Tensor& indices) override {
    cpu::max_pool2d(input, windows, out, indices);
  }
  void max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, const Pool2dWindows& windows,
                           const Tensor& grad_input) override {
    cpu::max_pool2d_backward(grad_out, indices, windows, grad_input);
  }
  void avg_pool2d(const Tensor& input, const Pool2dWindows& windows, const Tensor& out) override {
    cpu::avg_pool2d(input, windows, out);
  }
  void avg_pool2d_backward(const Tensor& grad_out, const Pool2dWindows& windows, const Tensor& grad_input) override {
    cpu::avg_pool2d_backward(grad_out, windows, grad_input);
  }

 private:
  static size_t nbytes_of(const Tensor& t) { return static_cast<size_t>(t.numel()) * element_size(t.dtype()); }
};

}  // namespace

Backend& cpu() {
  static CpuBackend instance;
  return instance;
}

}  // namespace tandem::backend
