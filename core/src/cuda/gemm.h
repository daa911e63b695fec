#pragma once
// Matrix products of the CUDA backend: tiny outputs over a long k in one kernel of tandem's own (Note [Tiny products]
// in small_products.h), cuBLASLt for those with a fused bias or bias gradient and for small ones (lt_matmul.h), cuBLAS
// for the rest.

#include "backend.h"
#include "tandem/core/tensor.h"

namespace tandem::cuda {

// Backend::gemm(a, b, epilogue, out) on the compute stream of `device`, which the caller has made current.
void gemm(const Tensor& a, const Tensor& b, const backend::GemmOptions& epilogue, const Tensor& out, int device);
// Backend::gemm_pair(first, second) on the compute stream of `device`, which the caller has made current: one
// kernel when one is a short product and the other a tiny one (Note [Paired small products] in small_products.h).
void gemm_pair(const backend::GemmCall& first, const backend::GemmCall& second, int device);
// Backend::gemm_batched(a, b, precision, out) on the compute stream of `device`, which the caller has made current:
// one cublasGemmStridedBatchedEx (batch strides as they are, 0 included).
void gemm_batched(const Tensor& a, const Tensor& b, Precision precision, const Tensor& out, int device);

}  // namespace tandem::cuda
