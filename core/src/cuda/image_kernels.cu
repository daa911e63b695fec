// The CUDA convolution and pooling kernels (image_kernels.h). Each reads the windows as sliding_windows.h defines
// them, the same functions the CPU backend calls, and visits a window's positions in the CPU kernels' order, so that
// both backends pick the same maximum and add the same terms in the same order.

#include "cuda/image_kernels.h"
#include "cuda/launch.cuh"

namespace tandem::cuda::kernels {
namespace {

using backend::Conv2dWindows;
using backend::covering_outputs;
using backend::OutputRange;
using backend::Pool2dWindows;
using backend::tap_at;
using backend::window_begin;
using backend::window_end;

__device__ void im2col_kernel(const float* input, Conv2dWindows c, float* cols) {
  const int64_t outputs = c.h.out * c.w.out, columns = c.batch * outputs;
  const int64_t total = c.channels * c.h.kernel * c.w.kernel * columns;
  for (int64_t e = global_thread(); e < total; e += grid_threads()) {
    const int64_t row = e / columns, column = e % columns;
    const int64_t tw = row % c.w.kernel, th = (row / c.w.kernel) % c.h.kernel, ch = row / (c.w.kernel * c.h.kernel);
    const int64_t n = column / outputs, oh = (column % outputs) / c.w.out, ow = column % c.w.out;
    const int64_t h = window_begin(c.h, oh, false) + th * c.h.dilation;
    const int64_t w = window_begin(c.w, ow, false) + tw * c.w.dilation;
    const bool inside = h >= 0 && h < c.h.in && w >= 0 && w < c.w.in;
    cols[e] = inside ? input[((n * c.channels + ch) * c.h.in + h) * c.w.in + w] : 0.0f;
  }
}

// One thread per input element: the sum of the cols entries that im2col copied from it.
__device__ void col2im_kernel(const float* cols, Conv2dWindows c, float* grad_input) {
  const int64_t outputs = c.h.out * c.w.out, columns = c.batch * outputs;
  const int64_t total = c.batch * c.channels * c.h.in * c.w.in;
  for (int64_t e = global_thread(); e < total; e += grid_threads()) {
    const int64_t w = e % c.w.in, h = (e / c.w.in) % c.h.in, ch = (e / (c.w.in * c.h.in)) % c.channels;
    const int64_t n = e / (c.w.in * c.h.in * c.channels);
    const OutputRange rows = covering_outputs(c.h, h, false), cols_range = covering_outputs(c.w, w, false);
    float sum = 0.0f;
    for (int64_t oh = rows.first; oh < rows.last; ++oh) {
      const int64_t th = tap_at(c.h, oh, h);
      if (th < 0) continue;
      for (int64_t ow = cols_range.first; ow < cols_range.last; ++ow) {
        const int64_t tw = tap_at(c.w, ow, w);
        if (tw < 0) continue;
        sum += cols[((ch * c.h.kernel + th) * c.w.kernel + tw) * columns + n * outputs + oh * c.w.out + ow];
      }
    }
    grad_input[e] = sum;
  }
}

__device__ void max_pool_kernel(const float* input, Pool2dWindows p, float* out, int64_t* indices) {
  const int64_t total = p.planes * p.h.out * p.w.out;
  for (int64_t e = global_thread(); e < total; e += grid_threads()) {
    const int64_t ow = e % p.w.out, oh = (e / p.w.out) % p.h.out, q = e / (p.w.out * p.h.out);
    const float* plane = input + q * p.h.in * p.w.in;
    const int64_t h0 = window_begin(p.h, oh, false), w0 = window_begin(p.w, ow, false);
    float best = -INFINITY;
    int64_t best_at = -1;
    for (int64_t th = 0; th < p.h.kernel; ++th) {
      const int64_t h = h0 + th * p.h.dilation;
      if (h < 0 || h >= p.h.in) continue;
      for (int64_t tw = 0; tw < p.w.kernel; ++tw) {
        const int64_t w = w0 + tw * p.w.dilation;
        if (w < 0 || w >= p.w.in) continue;
        const float v = plane[h * p.w.in + w];
        if (best_at < 0 || v > best || isnan(v)) {
          best = v;
          best_at = h * p.w.in + w;
        }
      }
    }
    out[e] = best;
    indices[e] = best_at;
  }
}

// One thread per input element: the gradients of the outputs whose maximum it is, in output order.
__device__ void max_pool_backward_kernel(const float* grad_out, const int64_t* indices, Pool2dWindows p,
                                         float* grad_input) {
  const int64_t total = p.planes * p.h.in * p.w.in;
  for (int64_t e = global_thread(); e < total; e += grid_threads()) {
    const int64_t position = e % (p.h.in * p.w.in), q = e / (p.h.in * p.w.in);
    const int64_t h = position / p.w.in, w = position % p.w.in;
    const OutputRange rows = covering_outputs(p.h, h, false), columns = covering_outputs(p.w, w, false);
    const int64_t base = q * p.h.out * p.w.out;
    float sum = 0.0f;
    for (int64_t oh = rows.first; oh < rows.last; ++oh)
      for (int64_t ow = columns.first; ow < columns.last; ++ow) {
        const int64_t o = base + oh * p.w.out + ow;
        if (indices[o] == position) sum += grad_out[o];
      }
    grad_input[e] = sum;
  }
}

__device__ void avg_pool_kernel(const float* input, Pool2dWindows p, float* out) {
  const int64_t total = p.planes * p.h.out * p.w.out;
  for (int64_t e = global_thread(); e < total; e += grid_threads()) {
    const int64_t ow = e % p.w.out, oh = (e / p.w.out) % p.h.out, q = e / (p.w.out * p.h.out);
    const float* plane = input + q * p.h.in * p.w.in;
    const int64_t h0 = max(window_begin(p.h, oh, p.adaptive), int64_t{0});
    const int64_t h1 = min(window_end(p.h, oh, p.adaptive), p.h.in);
    const int64_t w0 = max(window_begin(p.w, ow, p.adaptive), int64_t{0});
    const int64_t w1 = min(window_end(p.w, ow, p.adaptive), p.w.in);
    float sum = 0.0f;
    for (int64_t h = h0; h < h1; ++h)
      for (int64_t w = w0; w < w1; ++w) sum += plane[h * p.w.in + w];
    out[e] = sum / static_cast<float>(backend::average_divisor(p, oh, ow));
  }
}

// One thread per input element: each window holding it sends its gradient over its divisor, in output order.
__device__ void avg_pool_backward_kernel(const float* grad_out, Pool2dWindows p, float* grad_input) {
  const int64_t total = p.planes * p.h.in * p.w.in;
  for (int64_t e = global_thread(); e < total; e += grid_threads()) {
    const int64_t w = e % p.w.in, h = (e / p.w.in) % p.h.in, q = e / (p.w.in * p.h.in);
    const OutputRange rows = covering_outputs(p.h, h, p.adaptive), columns = covering_outputs(p.w, w, p.adaptive);
    const int64_t base = q * p.h.out * p.w.out;
    float sum = 0.0f;
    for (int64_t oh = rows.first; oh < rows.last; ++oh)
      for (int64_t ow = columns.first; ow < columns.last; ++ow) {
        sum += grad_out[base + oh * p.w.out + ow] / static_cast<float>(backend::average_divisor(p, oh, ow));
      }
    grad_input[e] = sum;
  }
}

}  // namespace

void im2col(const float* input, const Conv2dWindows& windows, float* cols, cudaStream_t stream) {
  const int64_t total =
      windows.channels * windows.h.kernel * windows.w.kernel * windows.batch * windows.h.out * windows.w.out;
  if (total == 0) return;
  launch<im2col_kernel>(blocks_for(total), kThreads, stream, input, windows, cols);
}

void col2im(const float* cols, const Conv2dWindows& windows, float* grad_input, cudaStream_t stream) {
  const int64_t total = windows.batch * windows.channels * windows.h.in * windows.w.in;
  if (total == 0) return;
  launch<col2im_kernel>(blocks_for(total), kThreads, stream, cols, windows, grad_input);
}

void max_pool2d(const float* input, const Pool2dWindows& windows, float* out, int64_t* indices, cudaStream_t stream) {
  const int64_t total = windows.planes * windows.h.out * windows.w.out;
  if (total == 0) return;
  launch<max_pool_kernel>(blocks_for(total), kThreads, stream, input, windows, out, indices);
}

void max_pool2d_backward(const float* grad_out, const int64_t* indices, const Pool2dWindows& windows, float* grad_input,
                         cudaStream_t stream) {
  const int64_t total = windows.planes * windows.h.in * windows.w.in;
  if (total == 0) return;
  launch<max_pool_backward_kernel>(blocks_for(total), kThreads, stream, grad_out, indices, windows, grad_input);
}

void avg_pool2d(const float* input, const Pool2dWindows& windows, float* out, cudaStream_t stream) {
  const int64_t total = windows.planes * windows.h.out * windows.w.out;
  if (total == 0) return;
  launch<avg_pool_kernel>(blocks_for(total), kThreads, stream, input, windows, out);
}

void avg_pool2d_backward(const float* grad_out, const Pool2dWindows& windows, float* grad_input, cudaStream_t stream) {
  const int64_t total = windows.planes * windows.h.in * windows.w.in;
  if (total == 0) return;
  launch<avg_pool_backward_kernel>(blocks_for(total), kThreads, stream, grad_out, windows, grad_input);
}

}  // namespace tandem::cuda::kernels
