#include "cuda/gemm_operand.h"

#include "tandem/core/error.h"

namespace tandem::cuda {

Operand transposed_operand(const Tensor& t, const char* name) {
  const int64_t rows = t.size(-2);
  const int64_t cols = t.size(-1);
  const int64_t row_stride = t.strides()[t.dim() - 2];
  const int64_t col_stride = t.strides()[t.dim() - 1];
  if ((cols == 1 || col_stride == 1) && (rows == 1 || row_stride >= cols))
    return {CUBLAS_OP_N, rows == 1 ? cols : row_stride};
  const bool transposed = (rows == 1 || row_stride == 1) && (cols == 1 || col_stride >= rows);
  TANDEM_INTERNAL_ASSERT(transposed, "cuda gemm: ", name, " with shape ", to_string(t.shape()), " and strides ",
                         to_string(t.strides()), " is neither row-major nor a transposed row-major matrix");
  return {CUBLAS_OP_T, cols == 1 ? rows : col_stride};
}

// Note [TF32]: products run in plain FP32 unless their precision says otherwise (Note [Precision modes] in
// tandem/core/precision.h; default_precision() follows allow_tf32(), TANDEM_ALLOW_TF32=1 or set_allow_tf32), so that
// they match the CPU backend to ~1e-5. TF32 lets cuBLAS use TF32 tensor cores: several times faster on large
// products, with 10-bit mantissa multiplies. BFloat16 products take bfloat16 operands and accumulate in FP32.
cublasComputeType_t compute_type(Precision precision) {
  return precision == Precision::TF32 ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
}

cudaDataType_t operand_type(Precision precision) {
  return precision == Precision::BFloat16 ? CUDA_R_16BF : CUDA_R_32F;
}

}  // namespace tandem::cuda
