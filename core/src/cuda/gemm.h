#pragma once
// Matrix products of the CUDA backend, through cuBLAS.

#include "tandem/core/tensor.h"

namespace tandem::cuda {

// out[m, n] = a[m, k] @ b[k, n] (+ bias[n] on every row when bias is defined), with the contract of
// Backend::gemm, on the compute stream of `device`, which the caller has made current.
void gemm(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out, int device);

}  // namespace tandem::cuda
