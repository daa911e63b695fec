// cuBLAS matrix products for row-major tensors (see gemm.h).

#include "cuda/gemm.h"

#include <climits>
#include <cstdlib>
#include <string_view>

#include "cuda/kernels.h"
#include "cuda/strided_layout.h"
#include "tandem/core/cuda/context.h"

namespace tandem::cuda {
namespace {

// Note [TF32]: products run in plain FP32 by default, so that they match the CPU backend to ~1e-5.
// TANDEM_ALLOW_TF32=1 (read once) lets cuBLAS use TF32 tensor cores: several times faster on large products,
// with 10-bit mantissa multiplies.
cublasComputeType_t compute_type() {
  static const cublasComputeType_t type = [] {
    const char* allow = std::getenv("TANDEM_ALLOW_TF32");
    return allow != nullptr && std::string_view(allow) == "1" ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F;
  }();
  return type;
}

int to_int(int64_t value, const char* what) {
  TANDEM_CHECK(value <= INT_MAX, "cuda gemm: ", what, " is ", value, " but cuBLAS takes at most ", INT_MAX);
  return static_cast<int>(value);
}

// A [rows, cols] tensor as cuBLAS sees it. cuBLAS is column-major, and a row-major [rows, cols] matrix is the
// column-major [cols, rows] matrix of its transpose; so out = a @ b is computed as out^T = b^T @ a^T, and each
// operand is described as its own transpose: a row-major view (unit column stride) is read as it is
// (CUBLAS_OP_N, leading dimension = its row stride); a transposed view (unit row stride) already is the
// column-major layout of the matrix, which cuBLAS then transposes (CUBLAS_OP_T, leading dimension = its column
// stride). Strides of size-1 dims do not matter.
struct Operand {
  cublasOperation_t op;
  int ld;
};

Operand transposed_operand(const Tensor& t, const char* name) {
  const int64_t rows = t.size(0);
  const int64_t cols = t.size(1);
  const int64_t row_stride = t.strides()[0];
  const int64_t col_stride = t.strides()[1];
  if ((cols == 1 || col_stride == 1) && (rows == 1 || row_stride >= cols))
    return {CUBLAS_OP_N, to_int(rows == 1 ? cols : row_stride, "a leading dimension")};
  const bool transposed = (rows == 1 || row_stride == 1) && (cols == 1 || col_stride >= rows);
  // raw::gemm copies any other operand (Backend::gemm's contract).
  TANDEM_INTERNAL_ASSERT(transposed, "cuda gemm: ", name, " with shape ", to_string(t.shape()), " and strides ",
                         to_string(t.strides()), " is neither row-major nor a transposed row-major matrix");
  return {CUBLAS_OP_T, to_int(cols == 1 ? rows : col_stride, "a leading dimension")};
}

}  // namespace

void gemm(const Tensor& a, const Tensor& b, const Tensor& bias, const Tensor& out, int device) {
  const int64_t m = out.size(0);
  const int64_t n = out.size(1);
  const int64_t k = a.size(1);
  if (m == 0 || n == 0) return;
  const cudaStream_t stream = compute_stream(device);
  // The bias is written into every row first and the product accumulated onto it (beta = 1).
  if (bias.defined()) {
    const Shape bias_strides{0, bias.strides()[0]};
    kernels::copy(bias.data(), out.mutable_data(), collapse_dims(out.shape(), {&out.strides(), &bias_strides}),
                  stream);
  } else if (k == 0) {
    kernels::fill(out.mutable_data(), collapse_dims(out.shape(), {&out.strides()}), 0.0f, stream);
  }
  if (k == 0) return;

  const Operand left = transposed_operand(b, "b");
  const Operand right = transposed_operand(a, "a");
  const float alpha = 1.0f;
  const float beta = bias.defined() ? 1.0f : 0.0f;
  TANDEM_CUBLAS_CHECK(cublasGemmEx(cublas_handle(device), left.op, right.op, to_int(n, "n"), to_int(m, "m"),
                                   to_int(k, "k"), &alpha, b.data(), CUDA_R_32F, left.ld, a.data(), CUDA_R_32F,
                                   right.ld, &beta, out.mutable_data(), CUDA_R_32F, to_int(n, "n"), compute_type(),
                                   CUBLAS_GEMM_DEFAULT));
}

}  // namespace tandem::cuda
