#pragma once
// The CPU backend's convolution and pooling kernels (Backend::im2col ... avg_pool2d_backward): plain loops over the
// windows of Note [Sliding windows] (sliding_windows.h); the products of a convolution are Eigen's (Backend::gemm).

#include "backend.h"

namespace tandem::cpu {

using backend::Conv2dWindows;
using backend::Pool2dWindows;

void im2col(const Tensor& input, const Conv2dWindows& windows, const Tensor& cols);
void col2im(const Tensor& cols, const Conv2dWindows& windows, const Tensor& grad_input);
void max_pool2d(const Tensor& input, const Pool2dWindows& windows, const Tensor& out, const Tensor& indices);
void max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, const Pool2dWindows& windows,
                         const Tensor& grad_input);
void avg_pool2d(const Tensor& input, const Pool2dWindows& windows, const Tensor& out);
void avg_pool2d_backward(const Tensor& grad_out, const Pool2dWindows& windows, const Tensor& grad_input);

}  // namespace tandem::cpu
