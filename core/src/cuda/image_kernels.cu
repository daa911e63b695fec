// The CUDA convolution and pooling kernels (image_kernels.h). Each reads the windows as sliding_windows.h defines
// them, the same functions the CPU backend calls, and visits a window's positions in the CPU kernels' order, so that
// both backends pick the same maximum and add the same terms in the same order.

#include <algorithm>
#include <cstdint>

#include "cuda/image_kernels.h"
#include "cuda/launch.cuh"

namespace tandem::cuda::kernels {
namespace {

using backend::BasicConv2dWindows;
using backend::BasicPool2dWindows;
using backend::Conv2dWindows;
using backend::covering_outputs;
using backend::output_at;
using backend::Pool2dWindows;
using backend::window_begin;
using backend::window_end;
using backend::windows_as;

// Note [32-bit window arithmetic]: these kernels are bound by their index arithmetic, not by memory: every element
// takes divisions and remainders to find its image, channel and position, and a 64-bit division costs several times
// a 32-bit one on the GPU. So each launch whose indices all fit in int32_t (the largest tensor it touches plus a
// grid-stride loop's overshoot) runs the kernel instantiated for int32_t, the rest for int64_t; the windows are
// converted once, on the host. The convolution kernels also amortize the divisions over a window: im2col gives each
// thread an input channel and an output position and writes its kH * kW entries of cols, and col2im gathers each
// input element's terms tap by tap (output_at: no division at stride 1), not by testing every covering output.
constexpr int64_t kLargest32 = INT32_MAX - kMaxBlocks * kThreads;

template <typename Index>
__device__ Index thread_index() {
  return static_cast<Index>(global_thread());
}
template <typename Index>
__device__ Index thread_count() {
  return static_cast<Index>(grid_threads());
}

// One thread per (input channel, output position): the kH * kW entries of cols that it reads, one row of cols
// after another (consecutive threads write consecutive columns).
template <typename Index>
__device__ void im2col_kernel(const float* input, BasicConv2dWindows<Index> c, float* cols) {
  const Index outputs = c.h.out * c.w.out, columns = c.batch * outputs, plane = c.h.in * c.w.in;
  const Index total = c.channels * columns;
  for (Index e = thread_index<Index>(); e < total; e += thread_count<Index>()) {
    const Index ch = e / columns, column = e - ch * columns;
    const Index n = column / outputs, position = column - n * outputs;
    const Index oh = position / c.w.out, ow = position - oh * c.w.out;
    const Index h0 = window_begin(c.h, oh, false), w0 = window_begin(c.w, ow, false);
    const float* image = input + (n * c.channels + ch) * plane;
    float* entry = cols + ch * c.h.kernel * c.w.kernel * columns + column;
    for (Index th = 0; th < c.h.kernel; ++th) {
      const Index h = h0 + th * c.h.dilation;
      const bool row_inside = h >= 0 && h < c.h.in;
      for (Index tw = 0; tw < c.w.kernel; ++tw, entry += columns) {
        const Index w = w0 + tw * c.w.dilation;
        *entry = row_inside && w >= 0 && w < c.w.in ? image[h * c.w.in + w] : 0.0f;
      }
    }
  }
}

// One thread per input element: the sum of the cols entries that im2col copied from it, tap by tap.
template <typename Index>
__device__ void col2im_kernel(const float* cols, BasicConv2dWindows<Index> c, float* grad_input) {
  const Index outputs = c.h.out * c.w.out, columns = c.batch * outputs;
  const Index total = c.batch * c.channels * c.h.in * c.w.in;
  for (Index e = thread_index<Index>(); e < total; e += thread_count<Index>()) {
    const Index w = e % c.w.in, h = (e / c.w.in) % c.h.in, image = e / (c.w.in * c.h.in);
    const Index ch = image % c.channels, n = image / c.channels;
    const float* rows = cols + ch * c.h.kernel * c.w.kernel * columns + n * outputs;
    float sum = 0.0f;
    for (Index th = 0; th < c.h.kernel; ++th) {
      const Index oh = output_at(c.h, th, h);
      if (oh < 0) continue;
      for (Index tw = 0; tw < c.w.kernel; ++tw) {
        const Index ow = output_at(c.w, tw, w);
        if (ow >= 0) sum += rows[(th * c.w.kernel + tw) * columns + oh * c.w.out + ow];
      }
    }
    grad_input[e] = sum;
  }
}

template <typename Index>
__device__ void max_pool_kernel(const float* input, BasicPool2dWindows<Index> p, float* out, int64_t* indices) {
  const Index total = p.planes * p.h.out * p.w.out;
  for (Index e = thread_index<Index>(); e < total; e += thread_count<Index>()) {
    const Index ow = e % p.w.out, oh = (e / p.w.out) % p.h.out, q = e / (p.w.out * p.h.out);
    const float* plane = input + q * p.h.in * p.w.in;
    const Index h0 = window_begin(p.h, oh, false), w0 = window_begin(p.w, ow, false);
    float best = -INFINITY;
    Index best_at = -1;
    for (Index th = 0; th < p.h.kernel; ++th) {
      const Index h = h0 + th * p.h.dilation;
      if (h < 0 || h >= p.h.in) continue;
      for (Index tw = 0; tw < p.w.kernel; ++tw) {
        const Index w = w0 + tw * p.w.dilation;
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
template <typename Index>
__device__ void max_pool_backward_kernel(const float* grad_out, const int64_t* indices, BasicPool2dWindows<Index> p,
                                         float* grad_input) {
  const Index total = p.planes * p.h.in * p.w.in;
  for (Index e = thread_index<Index>(); e < total; e += thread_count<Index>()) {
    const Index position = e % (p.h.in * p.w.in), q = e / (p.h.in * p.w.in);
    const Index h = position / p.w.in, w = position - h * p.w.in;
    const auto rows = covering_outputs(p.h, h, false), columns = covering_outputs(p.w, w, false);
    const Index base = q * p.h.out * p.w.out;
    float sum = 0.0f;
    for (Index oh = rows.first; oh < rows.last; ++oh)
      for (Index ow = columns.first; ow < columns.last; ++ow) {
        const Index o = base + oh * p.w.out + ow;
        if (indices[o] == position) sum += grad_out[o];
      }
    grad_input[e] = sum;
  }
}

template <typename Index>
__device__ void avg_pool_kernel(const float* input, BasicPool2dWindows<Index> p, float* out) {
  const Index total = p.planes * p.h.out * p.w.out;
  for (Index e = thread_index<Index>(); e < total; e += thread_count<Index>()) {
    const Index ow = e % p.w.out, oh = (e / p.w.out) % p.h.out, q = e / (p.w.out * p.h.out);
    const float* plane = input + q * p.h.in * p.w.in;
    const Index h0 = max(window_begin(p.h, oh, p.adaptive), Index{0});
    const Index h1 = min(window_end(p.h, oh, p.adaptive), p.h.in);
    const Index w0 = max(window_begin(p.w, ow, p.adaptive), Index{0});
    const Index w1 = min(window_end(p.w, ow, p.adaptive), p.w.in);
    float sum = 0.0f;
    for (Index h = h0; h < h1; ++h)
      for (Index w = w0; w < w1; ++w) sum += plane[h * p.w.in + w];
    out[e] = sum / static_cast<float>(backend::average_divisor(p, oh, ow));
  }
}

// One thread per input element: each window holding it sends its gradient over its divisor, in output order.
template <typename Index>
__device__ void avg_pool_backward_kernel(const float* grad_out, BasicPool2dWindows<Index> p, float* grad_input) {
  const Index total = p.planes * p.h.in * p.w.in;
  for (Index e = thread_index<Index>(); e < total; e += thread_count<Index>()) {
    const Index w = e % p.w.in, h = (e / p.w.in) % p.h.in, q = e / (p.w.in * p.h.in);
    const auto rows = covering_outputs(p.h, h, p.adaptive), columns = covering_outputs(p.w, w, p.adaptive);
    const Index base = q * p.h.out * p.w.out;
    float sum = 0.0f;
    for (Index oh = rows.first; oh < rows.last; ++oh)
      for (Index ow = columns.first; ow < columns.last; ++ow) {
        sum += grad_out[base + oh * p.w.out + ow] / static_cast<float>(backend::average_divisor(p, oh, ow));
      }
    grad_input[e] = sum;
  }
}

// Calls launch_as(Index{}) with the index type of Note [32-bit window arithmetic]: int32_t when `largest`, the most
// elements of any tensor the launch touches, allows it.
template <typename LaunchAs>
void with_index_type(int64_t largest, LaunchAs&& launch_as) {
  if (largest <= kLargest32) {
    launch_as(int32_t{});
  } else {
    launch_as(int64_t{});
  }
}

}  // namespace

void im2col(const float* input, const Conv2dWindows& windows, float* cols, cudaStream_t stream) {
  const int64_t threads = windows.channels * windows.batch * windows.h.out * windows.w.out;
  if (threads == 0) return;
  const int64_t entries = threads * windows.h.kernel * windows.w.kernel;
  const int64_t inputs = windows.batch * windows.channels * windows.h.in * windows.w.in;
  with_index_type(std::max(entries, inputs), [&](auto index) {
    using Index = decltype(index);
    launch<im2col_kernel<Index>>(blocks_for(threads), kThreads, stream, input, windows_as<Index>(windows), cols);
  });
}

void col2im(const float* cols, const Conv2dWindows& windows, float* grad_input, cudaStream_t stream) {
  const int64_t threads = windows.batch * windows.channels * windows.h.in * windows.w.in;
  if (threads == 0) return;
  const int64_t entries =
      windows.channels * windows.h.kernel * windows.w.kernel * windows.batch * windows.h.out * windows.w.out;
  with_index_type(std::max(entries, threads), [&](auto index) {
    using Index = decltype(index);
    launch<col2im_kernel<Index>>(blocks_for(threads), kThreads, stream, cols, windows_as<Index>(windows), grad_input);
  });
}

// The elements of a pooling's input and of its output.
int64_t pool_inputs(const Pool2dWindows& p) { return p.planes * p.h.in * p.w.in; }
int64_t pool_outputs(const Pool2dWindows& p) { return p.planes * p.h.out * p.w.out; }

void max_pool2d(const float* input, const Pool2dWindows& windows, float* out, int64_t* indices, cudaStream_t stream) {
  const int64_t threads = pool_outputs(windows);
  if (threads == 0) return;
  with_index_type(std::max(threads, pool_inputs(windows)), [&](auto index) {
    using Index = decltype(index);
    launch<max_pool_kernel<Index>>(blocks_for(threads), kThreads, stream, input, windows_as<Index>(windows), out,
                                   indices);
  });
}

void max_pool2d_backward(const float* grad_out, const int64_t* indices, const Pool2dWindows& windows, float* grad_input,
                         cudaStream_t stream) {
  const int64_t threads = pool_inputs(windows);
  if (threads == 0) return;
  with_index_type(std::max(threads, pool_outputs(windows)), [&](auto index) {
    using Index = decltype(index);
    launch<max_pool_backward_kernel<Index>>(blocks_for(threads), kThreads, stream, grad_out, indices,
                                            windows_as<Index>(windows), grad_input);
  });
}

void avg_pool2d(const float* input, const Pool2dWindows& windows, float* out, cudaStream_t stream) {
  const int64_t threads = pool_outputs(windows);
  if (threads == 0) return;
  with_index_type(std::max(threads, pool_inputs(windows)), [&](auto index) {
    using Index = decltype(index);
    launch<avg_pool_kernel<Index>>(blocks_for(threads), kThreads, stream, input, windows_as<Index>(windows), out);
  });
}

void avg_pool2d_backward(const float* grad_out, const Pool2dWindows& windows, float* grad_input, cudaStream_t stream) {
  const int64_t threads = pool_inputs(windows);
  if (threads == 0) return;
  with_index_type(std::max(threads, pool_outputs(windows)), [&](auto index) {
    using Index = decltype(index);
    launch<avg_pool_backward_kernel<Index>>(blocks_for(threads), kThreads, stream, grad_out, windows_as<Index>(windows),
                                            grad_input);
  });
}

}  // namespace tandem::cuda::kernels
