#pragma once
// The window arithmetic of the convolutions and poolings over [N, C, H, W] images (image_ops.h), shared by the CPU
// and CUDA backends (compiled for the host and, under nvcc, for the device), so that both read the same positions.
//
// Note [Sliding windows]: along one axis (height or width), output position o reads the input positions
//   o * stride - padding + t * dilation  for t in [0, kernel),
// of which those outside [0, in) are padding (zeros for a convolution, left out by a max pool, counted or not by an
// average pool). An adaptive pool's window for o is instead [floor(o * in / out), ceil((o + 1) * in / out)), as
// PyTorch's adaptive_avg_pool2d. The backward passes go the other way: for input position i they need the outputs
// whose windows may read it, covering_outputs below; every kernel of the backward computes one input element from
// those outputs (a gather), so no two threads write one element and the sums are in a fixed order.

#include <cstdint>

#include "tandem/core/host_device.h"

namespace tandem::backend {

// One axis of a sliding-window op: input and output sizes and the window's geometry. padding is the number of
// padded positions before the first input position; those after the last follow from out (an even kernel's "same"
// padding puts one more at the end, as PyTorch does).
struct WindowAxis {
  int64_t in = 0, out = 0;
  int64_t kernel = 1, stride = 1, padding = 0, dilation = 1;
};

// floor(a / b) and ceil(a / b) for b > 0 and any sign of a.
TANDEM_HOST_DEVICE inline int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
TANDEM_HOST_DEVICE inline int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }

// The first input position of output o's window (before clipping to the input), and the end of its fixed window:
// one past its last position, kept within the padded input [-padding, in + padding) as PyTorch's avg_pool2d does
// where ceil_mode lets the last window run past it.
TANDEM_HOST_DEVICE inline int64_t window_begin(const WindowAxis& a, int64_t o, bool adaptive) {
  return adaptive ? floor_div(o * a.in, a.out) : o * a.stride - a.padding;
}
TANDEM_HOST_DEVICE inline int64_t window_end(const WindowAxis& a, int64_t o, bool adaptive) {
  if (adaptive) return ceil_div((o + 1) * a.in, a.out);
  const int64_t end = window_begin(a, o, false) + (a.kernel - 1) * a.dilation + 1;
  return end < a.in + a.padding ? end : a.in + a.padding;
}

// The outputs [first, last) whose windows may read input position i: every one of them for an adaptive window or a
// dilation of 1; with a dilation > 1, those whose window has a position on i (the caller checks which).
struct OutputRange {
  int64_t first, last;
};
TANDEM_HOST_DEVICE inline OutputRange covering_outputs(const WindowAxis& a, int64_t i, bool adaptive) {
  int64_t first, last;
  if (adaptive) {
    first = floor_div(i * a.out, a.in);
    last = ceil_div((i + 1) * a.out, a.in);
  } else {
    first = ceil_div(i + a.padding - (a.kernel - 1) * a.dilation, a.stride);
    last = floor_div(i + a.padding, a.stride) + 1;
  }
  return {first > 0 ? first : 0, last < a.out ? last : a.out};
}

// For a fixed window: the tap t of output o's window that lies on input position i, or -1 when none does.
TANDEM_HOST_DEVICE inline int64_t tap_at(const WindowAxis& a, int64_t o, int64_t i) {
  const int64_t offset = i - window_begin(a, o, false);
  if (offset < 0 || offset % a.dilation != 0) return -1;
  const int64_t t = offset / a.dilation;
  return t < a.kernel ? t : -1;
}

// One convolution's geometry (Backend::im2col / col2im): input [batch, channels, h.in, w.in]; the kernel
// [h.kernel, w.kernel].
struct Conv2dWindows {
  int64_t batch = 0, channels = 0;
  WindowAxis h, w;
};

// One pooling's geometry (Backend::max_pool2d / avg_pool2d and their backward): `planes` = N * C images of
// [h.in, w.in] pooled to [h.out, w.out]. Adaptive windows ignore kernel, stride, padding and dilation. An average
// divides by the window's size within the padded input when count_include_pad (PyTorch's default), else by the
// number of input positions in it.
struct Pool2dWindows {
  int64_t planes = 0;
  WindowAxis h, w;
  bool adaptive = false;
  bool count_include_pad = true;
};

// The divisor of output (oh, ow) of an average pool.
TANDEM_HOST_DEVICE inline int64_t average_divisor(const Pool2dWindows& p, int64_t oh, int64_t ow) {
  const int64_t h0 = window_begin(p.h, oh, p.adaptive), h1 = window_end(p.h, oh, p.adaptive);
  const int64_t w0 = window_begin(p.w, ow, p.adaptive), w1 = window_end(p.w, ow, p.adaptive);
  if (p.count_include_pad || p.adaptive) return (h1 - h0) * (w1 - w0);
  const auto clipped = [](int64_t begin, int64_t end, int64_t in) {
    return (end < in ? end : in) - (begin > 0 ? begin : 0);
  };
  return clipped(h0, h1, p.h.in) * clipped(w0, w1, p.w.in);
}

}  // namespace tandem::backend
