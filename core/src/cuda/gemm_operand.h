#pragma once
// How the CUDA products (gemm.cpp through cuBLAS, lt_matmul.cpp through cuBLASLt) describe row-major tensors to
// column-major BLAS, and which compute and data types they ask for.

#include <cublas_v2.h>

#include <cstdint>

#include "tandem/core/precision.h"
#include "tandem/core/tensor.h"

namespace tandem::cuda {

// Note [Row-major operands]: cuBLAS is column-major, and a row-major [rows, cols] matrix is the column-major
// [cols, rows] matrix of its transpose; so out = a @ b is computed as out^T = b^T @ a^T, with b as BLAS's first
// operand and a as its second, and each operand is described as its own transpose: a row-major view (unit column
// stride) is read as it is (CUBLAS_OP_N, leading dimension = its row stride, stored as a column-major
// [cols, rows]); a transposed view (unit row stride) already is the column-major layout of the matrix, which BLAS
// then transposes (CUBLAS_OP_T, leading dimension = its column stride, stored as a column-major [rows, cols]).
// Strides of size-1 dims do not matter.
struct Operand {
  cublasOperation_t op;
  int64_t ld;
};

// The matrix in t's last two dims (each matrix of a batched operand): requires it to be row-major or a transposed
// view (raw::gemm copies any other operand; Backend::gemm's contract).
Operand transposed_operand(const Tensor& t, const char* name);

// The compute type of a product in `precision` (Note [TF32]): plain FP32 for Float32 and for BFloat16 (bfloat16
// operands, float32 accumulation), TF32 tensor-op math for TF32.
cublasComputeType_t compute_type(Precision precision);
// The data type of the operands of a product in `precision`: CUDA_R_16BF for BFloat16, else CUDA_R_32F. Outputs are
// always CUDA_R_32F.
cudaDataType_t operand_type(Precision precision);

}  // namespace tandem::cuda
