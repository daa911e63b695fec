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

// An argument of the index type that takes part in no deduction (std::type_identity_t, which the C++17 of the CUDA
// sources lacks): window_begin(axis, 3, false) takes the axis's type.
template <typename T>
struct NoDeduceType {
  using type = T;
};
template <typename T>
using NoDeduce = typename NoDeduceType<T>::type;

// One axis of a sliding-window op: input and output sizes and the window's geometry. padding is the number of
// padded positions before the first input position; those after the last follow from out (an even kernel's "same"
// padding puts one more at the end, as PyTorch does). The functions below are written once for any signed index
// type: the ops describe windows in int64_t (WindowAxis), and the CUDA kernels compute in int32_t where every index
// of a launch fits (Note [32-bit window arithmetic] in cuda/image_kernels.cu).
template <typename Index>
struct BasicWindowAxis {
  Index in = 0, out = 0;
  Index kernel = 1, stride = 1, padding = 0, dilation = 1;
};
using WindowAxis = BasicWindowAxis<int64_t>;

// The same axis in another index type (the caller knows that every value fits).
template <typename To, typename From>
TANDEM_HOST_DEVICE inline BasicWindowAxis<To> axis_as(const BasicWindowAxis<From>& a) {
  return {static_cast<To>(a.in),     static_cast<To>(a.out),     static_cast<To>(a.kernel),
          static_cast<To>(a.stride), static_cast<To>(a.padding), static_cast<To>(a.dilation)};
}

// floor(a / b) and ceil(a / b) for b > 0 and any sign of a.
template <typename Index>
TANDEM_HOST_DEVICE inline Index floor_div(Index a, Index b) {
  return a >= 0 ? a / b : -((-a + b - 1) / b);
}
template <typename Index>
TANDEM_HOST_DEVICE inline Index ceil_div(Index a, Index b) {
  return -floor_div(-a, b);
}

// The first input position of output o's window (before clipping to the input), and the end of its fixed window:
// one past its last position, kept within the padded input [-padding, in + padding) as PyTorch's avg_pool2d does
// where ceil_mode lets the last window run past it.
template <typename Index>
TANDEM_HOST_DEVICE inline Index window_begin(const BasicWindowAxis<Index>& a, NoDeduce<Index> o, bool adaptive) {
  return adaptive ? floor_div(o * a.in, a.out) : o * a.stride - a.padding;
}
template <typename Index>
TANDEM_HOST_DEVICE inline Index window_end(const BasicWindowAxis<Index>& a, NoDeduce<Index> o, bool adaptive) {
  if (adaptive) return ceil_div((o + 1) * a.in, a.out);
  const Index end = window_begin(a, o, false) + (a.kernel - 1) * a.dilation + 1;
  return end < a.in + a.padding ? end : a.in + a.padding;
}

// The outputs [first, last) whose windows may read input position i: every one of them for an adaptive window or a
// dilation of 1; with a dilation > 1, those whose window has a position on i (the caller checks which).
template <typename Index>
struct BasicOutputRange {
  Index first, last;
};
using OutputRange = BasicOutputRange<int64_t>;
template <typename Index>
TANDEM_HOST_DEVICE inline BasicOutputRange<Index> covering_outputs(const BasicWindowAxis<Index>& a, NoDeduce<Index> i,
                                                                   bool adaptive) {
  Index first, last;
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
template <typename Index>
TANDEM_HOST_DEVICE inline Index tap_at(const BasicWindowAxis<Index>& a, NoDeduce<Index> o, NoDeduce<Index> i) {
  const Index offset = i - window_begin(a, o, false);
  if (offset < 0 || offset % a.dilation != 0) return -1;
  const Index t = offset / a.dilation;
  return t < a.kernel ? t : -1;
}

// The other way round: the output o whose window's tap t lies on input position i (o * stride - padding +
// t * dilation == i, 0 <= o < out), or -1 when none does: a gather over the taps in their order adds the terms in
// the order of the CPU's adjoint loops (tap by tap), with no division when the stride is 1.
template <typename Index>
TANDEM_HOST_DEVICE inline Index output_at(const BasicWindowAxis<Index>& a, NoDeduce<Index> t, NoDeduce<Index> i) {
  const Index offset = i + a.padding - t * a.dilation;
  if (offset < 0) return -1;
  const Index o = a.stride == 1 ? offset : offset / a.stride;
  return o < a.out && o * a.stride == offset ? o : -1;
}

// One convolution's geometry (Backend::im2col / col2im): input [batch, channels, h.in, w.in]; the kernel
// [h.kernel, w.kernel].
template <typename Index>
struct BasicConv2dWindows {
  Index batch = 0, channels = 0;
  BasicWindowAxis<Index> h, w;
};
using Conv2dWindows = BasicConv2dWindows<int64_t>;
template <typename To, typename From>
TANDEM_HOST_DEVICE inline BasicConv2dWindows<To> windows_as(const BasicConv2dWindows<From>& c) {
  return {static_cast<To>(c.batch), static_cast<To>(c.channels), axis_as<To>(c.h), axis_as<To>(c.w)};
}

// One pooling's geometry (Backend::max_pool2d / avg_pool2d and their backward): `planes` = N * C images of
// [h.in, w.in] pooled to [h.out, w.out]. Adaptive windows ignore kernel, stride, padding and dilation. An average
// divides by the window's size within the padded input when count_include_pad (PyTorch's default), else by the
// number of input positions in it.
template <typename Index>
struct BasicPool2dWindows {
  Index planes = 0;
  BasicWindowAxis<Index> h, w;
  bool adaptive = false;
  bool count_include_pad = true;
};
using Pool2dWindows = BasicPool2dWindows<int64_t>;
template <typename To, typename From>
TANDEM_HOST_DEVICE inline BasicPool2dWindows<To> windows_as(const BasicPool2dWindows<From>& p) {
  return {static_cast<To>(p.planes), axis_as<To>(p.h), axis_as<To>(p.w), p.adaptive, p.count_include_pad};
}

// The divisor of output (oh, ow) of an average pool.
template <typename Index>
TANDEM_HOST_DEVICE inline Index average_divisor(const BasicPool2dWindows<Index>& p, NoDeduce<Index> oh,
                                                NoDeduce<Index> ow) {
  const Index h0 = window_begin(p.h, oh, p.adaptive), h1 = window_end(p.h, oh, p.adaptive);
  const Index w0 = window_begin(p.w, ow, p.adaptive), w1 = window_end(p.w, ow, p.adaptive);
  if (p.count_include_pad || p.adaptive) return (h1 - h0) * (w1 - w0);
  const auto clipped = [](Index begin, Index end, Index in) { return (end < in ? end : in) - (begin > 0 ? begin : 0); };
  return clipped(h0, h1, p.h.in) * clipped(w0, w1, p.w.in);
}

}  // namespace tandem::backend
