// The CPU backend's general kernels: one strided loop for every pointwise functor of kernel_ops.h (a plain loop over
// rows where every operand is contiguous), reductions along one dimension (sums in double), and gather / scatter-add
// along a dimension.

#include "cpu/elementwise.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu/strided_loop.h"
#include "tandem/core/error.h"

namespace tandem::cpu {
namespace {

// Steps of 1 known to the compiler: a row of contiguous operands is a loop it can vectorize.
struct UnitSteps {
  constexpr int64_t operator[](size_t) const { return 1; }
};

template <int kArity, typename F>
void pointwise_loop(F f, const std::vector<Tensor>& inputs, const Tensor& out) {
  constexpr size_t N = kArity + 1;
  std::array<const Shape*, N> strides{&out.strides()};
  std::array<const float*, kArity> in{};
  for (int k = 0; k < kArity; ++k) {
    strides[k + 1] = &inputs[k].strides();
    in[k] = inputs[k].data();
  }
  float* po = out.mutable_data();
  const auto row = [&](int64_t length, const Offsets<N>& at, const auto& step) {
    for (int64_t i = 0; i < length; ++i) {
      const auto load = [&](int k) { return in[k][at[k + 1] + i * step[k + 1]]; };
      float value;
      if constexpr (kArity == 1) {
        value = f(load(0));
      } else if constexpr (kArity == 2) {
        value = f(load(0), load(1));
      } else {
        value = f(load(0), load(1), load(2));
      }
      po[at[0] + i * step[0]] = value;
    }
  };
  for_each_row<N>(out.shape(), strides, [&](int64_t length, const Offsets<N>& at, const Offsets<N>& step) {
    if (std::all_of(step.begin(), step.end(), [](int64_t s) { return s == 1; })) {
      row(length, at, UnitSteps{});
    } else {
      row(length, at, step);
    }
  });
}

template <bool kMax>
void extreme(const float* x, int64_t outer, int64_t reduce, int64_t inner, float* values, int64_t* indices) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < inner; ++c) {
      const float* row = x + o * reduce * inner + c;
      backend::Extreme<kMax> best{row[0], 0};
      for (int64_t r = 1; r < reduce; ++r) best.offer(row[r * inner], r);
      values[o * inner + c] = best.value;
      if (indices != nullptr) indices[o * inner + c] = best.index;
    }
}

void log_sum_exp(const float* x, int64_t outer, int64_t reduce, int64_t inner, float* values) {
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t c = 0; c < inner; ++c) {
      const float* row = x + o * reduce * inner + c;
      backend::Extreme<true> max{row[0], 0};
      for (int64_t r = 1; r < reduce; ++r) max.offer(row[r * inner], r);
      const float m = max.value;
      float result = m;
      if (std::isfinite(m)) {
        double total = 0.0;
        for (int64_t r = 0; r < reduce; ++r) total += std::exp(static_cast<double>(row[r * inner]) - m);
        result = static_cast<float>(m + std::log(total));
      }
      values[o * inner + c] = result;
    }
}

// Calls visit(x_offset, index_value, other_offset) for every position of index's shape, where x_offset is the
// position's offset in `x_like` with coordinate `dim` zeroed and other_offset its offset in `other`.
template <typename Visit>
void for_each_indexed(const Tensor& x_like, int64_t dim, const Tensor& index, const Tensor& other, Visit&& visit) {
  Shape base_strides = x_like.strides();
  base_strides[dim] = 0;
  const int64_t* pi = index.data_as<int64_t>();
  for_each_row<3>(index.shape(), {&other.strides(), &index.strides(), &base_strides},
                  [&](int64_t length, const Offsets<3>& at, const Offsets<3>& step) {
                    for (int64_t i = 0; i < length; ++i)
                      visit(at[2] + i * step[2], pi[at[1] + i * step[1]], at[0] + i * step[0]);
                  });
}

}  // namespace

void pointwise(const backend::PointwiseCall& call, const std::vector<Tensor>& inputs, const Tensor& out) {
  backend::visit_pointwise(call, [&](auto f) { pointwise_loop<decltype(f)::kArity>(f, inputs, out); });
}

void reduce_dim(backend::ReduceOp op, const Tensor& x, int64_t outer, int64_t reduce, int64_t inner,
                const Tensor& values, const Tensor& indices) {
  int64_t* pi = indices.defined() ? indices.mutable_data_as<int64_t>() : nullptr;
  switch (op) {
    case backend::ReduceOp::Max: return extreme<true>(x.data(), outer, reduce, inner, values.mutable_data(), pi);
    case backend::ReduceOp::Min: return extreme<false>(x.data(), outer, reduce, inner, values.mutable_data(), pi);
    case backend::ReduceOp::LogSumExp: return log_sum_exp(x.data(), outer, reduce, inner, values.mutable_data());
  }
  TANDEM_INTERNAL_ASSERT(false, "cpu backend reduce_dim: unknown op ", static_cast<int>(op));
}

void gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) {
  const float* px = x.data();
  float* po = out.mutable_data();
  const int64_t dim_stride = x.strides()[dim];
  for_each_indexed(x, dim, index, out, [&](int64_t base, int64_t i, int64_t o) { po[o] = px[base + i * dim_stride]; });
}

void scatter_add(const Tensor& src, int64_t dim, const Tensor& index, const Tensor& target) {
  const float* ps = src.data();
  float* pt = target.mutable_data();
  const int64_t dim_stride = target.strides()[dim];
  for_each_indexed(target, dim, index, src,
                   [&](int64_t base, int64_t i, int64_t s) { pt[base + i * dim_stride] += ps[s]; });
}

}  // namespace tandem::cpu
