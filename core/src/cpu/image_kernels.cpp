// The CPU convolution and pooling kernels (image_kernels.h). im2col and the forward poolings write each output once;
// col2im and the backward poolings zero their gradient and add every output's share into it (the adjoint loops).
#include "cpu/image_kernels.h"

#include <algorithm>
#include <cmath>
#include <limits>

namespace tandem::cpu {
namespace {

using backend::WindowAxis;

// Calls fn(tap, position) for each tap of output o's fixed window whose input position lies inside the input.
template <typename Fn>
void for_each_tap(const WindowAxis& a, int64_t o, Fn&& fn) {
  const int64_t begin = backend::window_begin(a, o, false);
  for (int64_t t = 0; t < a.kernel; ++t) {
    const int64_t i = begin + t * a.dilation;
    if (i >= 0 && i < a.in) fn(t, i);
  }
}

// Calls fn(position) for each input position of output o's average window, clipped to the input.
template <typename Fn>
void for_each_position(const WindowAxis& a, int64_t o, bool adaptive, Fn&& fn) {
  const int64_t begin = std::max<int64_t>(backend::window_begin(a, o, adaptive), 0);
  const int64_t end = std::min(backend::window_end(a, o, adaptive), a.in);
  for (int64_t i = begin; i < end; ++i) fn(i);
}

// Calls fn(cols entry, input element) for every entry of cols that reads an input position (Backend::im2col's
// layout), and zero(cols entry) for those in the padding.
template <typename Read, typename Zero>
void for_each_column_entry(const Conv2dWindows& c, Read&& read, Zero&& zero) {
  const int64_t kh = c.h.kernel, kw = c.w.kernel, plane = c.h.in * c.w.in, outputs = c.h.out * c.w.out;
  const int64_t columns = c.batch * outputs;
  for (int64_t ch = 0; ch < c.channels; ++ch)
    for (int64_t th = 0; th < kh; ++th)
      for (int64_t tw = 0; tw < kw; ++tw) {
        const int64_t row = ((ch * kh + th) * kw + tw) * columns;
        for (int64_t n = 0; n < c.batch; ++n)
          for (int64_t oh = 0; oh < c.h.out; ++oh) {
            const int64_t h = backend::window_begin(c.h, oh, false) + th * c.h.dilation;
            for (int64_t ow = 0; ow < c.w.out; ++ow) {
              const int64_t w = backend::window_begin(c.w, ow, false) + tw * c.w.dilation;
              const int64_t entry = row + n * outputs + oh * c.w.out + ow;
              if (h >= 0 && h < c.h.in && w >= 0 && w < c.w.in) {
                read(entry, (n * c.channels + ch) * plane + h * c.w.in + w);
              } else {
                zero(entry);
              }
            }
          }
      }
}

}  // namespace

void im2col(const Tensor& input, const Conv2dWindows& windows, const Tensor& cols) {
  const float* x = input.data();
  float* out = cols.mutable_data();
  for_each_column_entry(
      windows, [&](int64_t entry, int64_t element) { out[entry] = x[element]; },
      [&](int64_t entry) { out[entry] = 0.0f; });
}

void col2im(const Tensor& cols, const Conv2dWindows& windows, const Tensor& grad_input) {
  const float* in = cols.data();
  float* grad = grad_input.mutable_data();
  std::fill(grad, grad + grad_input.numel(), 0.0f);
  for_each_column_entry(
      windows, [&](int64_t entry, int64_t element) { grad[element] += in[entry]; }, [](int64_t) {});
}

void max_pool2d(const Tensor& input, const Pool2dWindows& p, const Tensor& out, const Tensor& indices) {
  const float* x = input.data();
  float* values = out.mutable_data();
  int64_t* index = indices.mutable_data_as<int64_t>();
  const int64_t plane = p.h.in * p.w.in;
  for (int64_t q = 0; q < p.planes; ++q)
    for (int64_t oh = 0; oh < p.h.out; ++oh)
      for (int64_t ow = 0; ow < p.w.out; ++ow) {
        float best = -std::numeric_limits<float>::infinity();
        int64_t best_at = -1;
        for_each_tap(p.h, oh, [&](int64_t, int64_t h) {
          for_each_tap(p.w, ow, [&](int64_t, int64_t w) {
            const float v = x[q * plane + h * p.w.in + w];
            if (best_at < 0 || v > best || std::isnan(v)) {
              best = v;
              best_at = h * p.w.in + w;
            }
          });
        });
        const int64_t o = (q * p.h.out + oh) * p.w.out + ow;
        values[o] = best;
        index[o] = best_at;
      }
}

void max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, const Pool2dWindows& p,
                         const Tensor& grad_input) {
  const float* g = grad_out.data();
  const int64_t* index = indices.data_as<int64_t>();
  float* grad = grad_input.mutable_data();
  std::fill(grad, grad + grad_input.numel(), 0.0f);
  const int64_t plane = p.h.in * p.w.in, outputs = p.h.out * p.w.out;
  for (int64_t q = 0; q < p.planes; ++q)
    for (int64_t o = 0; o < outputs; ++o) grad[q * plane + index[q * outputs + o]] += g[q * outputs + o];
}

void avg_pool2d(const Tensor& input, const Pool2dWindows& p, const Tensor& out) {
  const float* x = input.data();
  float* values = out.mutable_data();
  const int64_t plane = p.h.in * p.w.in;
  for (int64_t q = 0; q < p.planes; ++q)
    for (int64_t oh = 0; oh < p.h.out; ++oh)
      for (int64_t ow = 0; ow < p.w.out; ++ow) {
        float sum = 0.0f;
        for_each_position(p.h, oh, p.adaptive, [&](int64_t h) {
          for_each_position(p.w, ow, p.adaptive, [&](int64_t w) { sum += x[q * plane + h * p.w.in + w]; });
        });
        values[(q * p.h.out + oh) * p.w.out + ow] = sum / static_cast<float>(backend::average_divisor(p, oh, ow));
      }
}

void avg_pool2d_backward(const Tensor& grad_out, const Pool2dWindows& p, const Tensor& grad_input) {
  const float* g = grad_out.data();
  float* grad = grad_input.mutable_data();
  std::fill(grad, grad + grad_input.numel(), 0.0f);
  const int64_t plane = p.h.in * p.w.in;
  for (int64_t q = 0; q < p.planes; ++q)
    for (int64_t oh = 0; oh < p.h.out; ++oh)
      for (int64_t ow = 0; ow < p.w.out; ++ow) {
        const float share =
            g[(q * p.h.out + oh) * p.w.out + ow] / static_cast<float>(backend::average_divisor(p, oh, ow));
        for_each_position(p.h, oh, p.adaptive, [&](int64_t h) {
          for_each_position(p.w, ow, p.adaptive, [&](int64_t w) { grad[q * plane + h * p.w.in + w] += share; });
        });
      }
}

}  // namespace tandem::cpu
