#pragma once
// Differentiable tensor operations. Every op checks that its inputs are defined, live on one device and have
// compatible shapes, and throws tandem::Error naming the op otherwise. Elementwise ops broadcast like NumPy.

#include <vector>

#include "tandem/core/tensor.h"

namespace tandem {

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, float s);
Tensor operator*(float s, const Tensor& a);
Tensor operator/(const Tensor& a, float s);
Tensor operator-(const Tensor& a);
Tensor matmul(const Tensor& a, const Tensor& b);       // 2-D x 2-D
// x W^T + b with x: [n, in], W: [out, in], b: [out] (or undefined); one fused op (one GEMM, bias in its epilogue)
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias);
Tensor relu(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sum(const Tensor& x);                            // all elements -> shape {}
Tensor sum(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
// mean((input - target)^2) as one fused op; shapes must match exactly.
Tensor mse_loss(const Tensor& input, const Tensor& target);

// Compares values on any devices (copies to the host): |a - b| <= atol + rtol * |b| elementwise, shapes equal.
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);
// Largest |a - b| over all elements (shapes must match), on any devices.
double max_abs_diff(const Tensor& a, const Tensor& b);

}  // namespace tandem
