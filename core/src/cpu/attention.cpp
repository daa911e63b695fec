#include "cpu/attention.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "tandem/core/bfloat16.h"

namespace tandem::cpu {
namespace {

// The matrices [rows, E] of a 4-D attention operand [B1, B2, rows, E] (stride 1 in E), read as doubles.
class Operand {
 public:
  explicit Operand(const Tensor& t)
      : bytes_(static_cast<const unsigned char*>(t.data_ptr())),
        bfloat16_(t.dtype() == DType::BFloat16),
        b2_(t.size(1)),
        batch1_(t.strides()[0]),
        batch2_(t.strides()[1]),
        row_(t.strides()[2]) {}
  // Where element (row, e) of matrix n (n = b1 * B2 + b2) lies, in elements from the tensor's start.
  int64_t index(int64_t n, int64_t row, int64_t e) const {
    return (n / b2_) * batch1_ + (n % b2_) * batch2_ + row * row_ + e;
  }
  double at(int64_t n, int64_t row, int64_t e) const {
    const int64_t index = this->index(n, row, e);
    if (bfloat16_) {
      BFloat16 value;
      std::memcpy(&value, bytes_ + index * 2, 2);
      return static_cast<float>(value);
    }
    float value;
    std::memcpy(&value, bytes_ + index * 4, 4);
    return value;
  }

 private:
  const unsigned char* bytes_;
  bool bfloat16_;
  int64_t b2_, batch1_, batch2_, row_;
};

// Writes v to the element i places from the start of the float32 or bfloat16 tensor t.
void store(const Tensor& t, int64_t i, double v) {
  if (t.dtype() == DType::BFloat16) {
    const BFloat16 value(static_cast<float>(v));
    std::memcpy(static_cast<unsigned char*>(t.mutable_data_ptr()) + i * 2, &value, 2);
  } else {
    t.mutable_data()[i] = static_cast<float>(v);
  }
}

// The scaled scores of query i of matrix n against every key, -inf where causality leaves the key out.
void scores_of(const AttentionCall& call, const Operand& q, const Operand& k, int64_t n, int64_t i, int64_t S,
               int64_t E, std::vector<double>& scores) {
  for (int64_t j = 0; j < S; ++j) {
    if (call.causal && j > i) {
      scores[j] = -std::numeric_limits<double>::infinity();
      continue;
    }
    double dot = 0;
    for (int64_t e = 0; e < E; ++e) dot += q.at(n, i, e) * k.at(n, j, e);
    scores[j] = dot * call.scale;
  }
}

// The dropout factors of row i of matrix n (1 where the call has no dropout).
void dropout_factors(const AttentionCall& call, int64_t n, int64_t i, int64_t L, int64_t S, std::vector<double>& z) {
  for (int64_t j = 0; j < S; ++j) {
    z[j] = call.dropout.active() ? call.dropout.factor(static_cast<uint64_t>((n * L + i) * S + j)) : 1.0;
  }
}

}  // namespace

void attention_forward(const AttentionCall& call, const Tensor& out, const Tensor& lse) {
  const int64_t N = call.q.size(0) * call.q.size(1), L = call.q.size(2), S = call.k.size(2), E = call.q.size(3);
  const Operand q(call.q), k(call.k), v(call.v), o(out);
  std::vector<double> p(static_cast<size_t>(S)), z(static_cast<size_t>(S));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t i = 0; i < L; ++i) {
      scores_of(call, q, k, n, i, S, E, p);
      dropout_factors(call, n, i, L, S, z);
      double largest = -std::numeric_limits<double>::infinity();
      for (const double s : p) largest = std::max(largest, s);
      const double shift = std::isinf(largest) ? 0.0 : largest;
      double total = 0;
      for (double& s : p) total += (s = std::exp(s - shift));
      lse.mutable_data()[n * L + i] = static_cast<float>(shift + std::log(total));  // -inf: no keys
      for (int64_t e = 0; e < E; ++e) {
        double value = 0;
        for (int64_t j = 0; j < S; ++j) value += p[j] * z[j] * v.at(n, j, e);
        store(out, o.index(n, i, e), value / total);  // 0 / 0 = NaN without keys
      }
    }
  }
}

// With P the softmax of a row, Z its dropout factors and dP_j = dO . v_j: dV_j += P_j Z_j dO, dS_j = P_j (Z_j dP_j - D)
// where D = dO . O (the sum of P_j Z_j dP_j), dQ += scale * dS_j k_j and dK_j += scale * dS_j q.
void attention_backward(const AttentionCall& call, const Tensor& out, const Tensor& grad_out, const Tensor& lse,
                        const Tensor& grad_q, const Tensor& grad_k, const Tensor& grad_v) {
  const int64_t N = call.q.size(0) * call.q.size(1), L = call.q.size(2), S = call.k.size(2), E = call.q.size(3);
  const Operand q(call.q), k(call.k), v(call.v), o(out), dout(grad_out);
  std::vector<double> dq(static_cast<size_t>(N * L * E)), dk(static_cast<size_t>(N * S * E)),
      dv(static_cast<size_t>(N * S * E)), p(static_cast<size_t>(S)), z(static_cast<size_t>(S));
  for (int64_t n = 0; n < N; ++n) {
    for (int64_t i = 0; i < L; ++i) {
      scores_of(call, q, k, n, i, S, E, p);
      dropout_factors(call, n, i, L, S, z);
      const double row_lse = lse.data()[n * L + i];
      double d = 0;
      for (int64_t e = 0; e < E; ++e) d += dout.at(n, i, e) * o.at(n, i, e);
      for (int64_t j = 0; j < S; ++j) {
        const double pj = std::exp(p[j] - row_lse);
        if (pj == 0.0) continue;  // left out (or underflowed): no contribution
        double dp = 0;
        for (int64_t e = 0; e < E; ++e) dp += dout.at(n, i, e) * v.at(n, j, e);
        const double ds = pj * (z[j] * dp - d) * call.scale;
        for (int64_t e = 0; e < E; ++e) {
          dv[(n * S + j) * E + e] += pj * z[j] * dout.at(n, i, e);
          dq[(n * L + i) * E + e] += ds * k.at(n, j, e);
          dk[(n * S + j) * E + e] += ds * q.at(n, i, e);
        }
      }
    }
  }
  const auto write = [E](const Tensor& grad, const std::vector<double>& values, int64_t matrices, int64_t rows) {
    const Operand place(grad);
    for (int64_t n = 0; n < matrices; ++n)
      for (int64_t i = 0; i < rows; ++i)
        for (int64_t e = 0; e < E; ++e)
          store(grad, place.index(n, i, e), values[static_cast<size_t>((n * rows + i) * E + e)]);
  };
  write(grad_q, dq, N, L);
  write(grad_k, dk, N, S);
  write(grad_v, dv, N, S);
}

}  // namespace tandem::cpu
