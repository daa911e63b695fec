// Matrix products of the CUDA backend (see gemm.h): kernels of tandem's own for tiny outputs over a long k and for
// short k, cuBLASLt where it fuses the epilogue or the product is small, otherwise cuBLAS with the epilogue in passes
// of its own.

#include "cuda/gemm.h"

#include <climits>

#include "cuda/convert.h"
#include "cuda/elementwise.h"
#include "cuda/gemm_operand.h"
#include "cuda/lt_matmul.h"
#include "cuda/reductions.h"
#include "cuda/small_products.h"
#include "cuda/strided_layout.h"
#include "tandem/core/cuda/context.h"

namespace tandem::cuda {
namespace {

int to_int(int64_t value, const char* what) {
  TANDEM_CHECK(value <= INT_MAX, "cuda gemm: ", what, " is ", value, " but cuBLAS takes at most ", INT_MAX);
  return static_cast<int>(value);
}

// sums[i] = the sum of a's row i, for a contiguous [m, k] or the transpose of a contiguous [k, m] (Backend::gemm's
// contract when row sums are asked for); both are one sum_dim over memory. A bfloat16 a is widened (exactly) into a
// contiguous float32 copy first.
void sum_rows(const Tensor& a, const Tensor& sums, cudaStream_t stream) {
  const int64_t m = a.size(0);
  const int64_t k = a.size(1);
  if (m == 0) return;
  if (k == 0) {
    kernels::fill(sums.mutable_data(), collapse_dims(sums.shape(), {&sums.strides()}), 0.0f, stream);
    return;
  }
  Tensor values = a;
  if (a.dtype() == DType::BFloat16) {
    values = Tensor::empty(a.shape(), DType::Float32, a.device());  // contiguous
    kernels::convert(a.data_ptr(), a.dtype(), values.mutable_data_ptr(), DType::Float32,
                     collapse_dims(a.shape(), {&values.strides(), &a.strides()}), stream);
  }
  if (values.is_contiguous()) {
    kernels::sum_dim(values.data(), sums.mutable_data(), m, k, 1, stream);
  } else {
    kernels::sum_dim(values.data(), sums.mutable_data(), 1, k, m, stream);
  }
}

// out = a @ b, or out += a @ b with `accumulate`, in `precision`, with no epilogue: through cuBLASLt when it takes
// the product (small products, lt_matmul.h) unless `lt_tried` says it declined this very product already, otherwise
// through cublasGemmEx.
void plain_product(const Tensor& a, const Tensor& b, bool accumulate, Precision precision, bool lt_tried,
                   const Tensor& out, int device) {
  const backend::GemmOptions plain{.accumulate = accumulate, .precision = precision};
  if (!lt_tried && lt_matmul(a, b, plain, out, device)) return;
  const int64_t m = out.size(0);
  const int64_t n = out.size(1);
  const int64_t k = a.size(1);
  const Operand left = transposed_operand(b, "b");
  const Operand right = transposed_operand(a, "a");
  const cudaDataType_t type = operand_type(precision);
  const float alpha = 1.0f;
  const float beta = accumulate ? 1.0f : 0.0f;
  TANDEM_CUBLAS_CHECK(cublasGemmEx(
      cublas_handle(device), left.op, right.op, to_int(n, "n"), to_int(m, "m"), to_int(k, "k"), &alpha, b.data_ptr(),
      type, to_int(left.ld, "b leading dimension"), a.data_ptr(), type, to_int(right.ld, "a leading dimension"), &beta,
      out.mutable_data(), CUDA_R_32F, to_int(n, "n"), compute_type(precision), CUBLAS_GEMM_DEFAULT));
}

// The product with the bias copied into every row first and the product accumulated onto it (beta = 1), the row sums
// reduced by a kernel of their own (straight into options.a_row_sums) and ReLU applied in place afterwards.
void gemm_in_passes(const Tensor& a, const Tensor& b, const backend::GemmOptions& options, const Tensor& out,
                    int device) {
  const int64_t m = out.size(0);
  const int64_t n = out.size(1);
  const int64_t k = a.size(1);
  const cudaStream_t stream = compute_stream(device);
  if (options.a_row_sums.defined()) sum_rows(a, options.a_row_sums, stream);
  if (m == 0 || n == 0) return;
  const Tensor& bias = options.bias;
  if (bias.defined()) {
    const Shape bias_strides{0, bias.strides()[0]};
    kernels::copy(bias.data(), out.mutable_data(), collapse_dims(out.shape(), {&out.strides(), &bias_strides}), stream);
  } else if (k == 0 && !options.accumulate) {
    kernels::fill(out.mutable_data(), collapse_dims(out.shape(), {&out.strides()}), 0.0f, stream);
  }
  if (k > 0) {
    // Without anything to fuse, gemm() has offered cuBLASLt this very product already.
    const bool lt_tried = !bias.defined() && !options.a_row_sums.defined() && !options.relu;
    plain_product(a, b, bias.defined() || options.accumulate, options.precision, lt_tried, out, device);
  }
  if (options.relu) {
    const float* in[] = {out.data()};
    kernels::pointwise({backend::Pointwise::Relu}, in, out.mutable_data(),
                       collapse_dims(out.shape(), {&out.strides(), &out.strides()}), stream);
  }
}

// The operands, out and the epilogue of a product for the kernels of kernels::SmallProduct.
kernels::SmallProduct small_product(const Tensor& a, const Tensor& b, const backend::GemmOptions& options,
                                    const Tensor& out) {
  return {.m = out.size(0),
          .n = out.size(1),
          .k = a.size(1),
          .a = a.data_ptr(),
          .a_row_stride = a.strides()[0],
          .a_col_stride = a.strides()[1],
          .b = b.data_ptr(),
          .b_row_stride = b.strides()[0],
          .b_col_stride = b.strides()[1],
          .bfloat16 = a.dtype() == DType::BFloat16,
          .out = out.mutable_data(),
          .accumulate = options.accumulate,
          .a_row_sums = backend::mutable_data_or_null(options.a_row_sums),
          .bias = backend::data_or_null(options.bias),
          .relu = options.relu};
}

// Note [Tiny products] (small_products.h) says why; this is which products take tiny_product, ahead of cuBLASLt and
// cuBLAS. The output is tiny: at most kTinyOutput elements, so the grid (one block per element, plus one per row sum)
// is about one wave of an H200's 132 SMs; a larger output has tiles enough for cuBLAS to fill the GPU without splitting
// k. k is long: at least kTinyMinK, one element per thread and more, where cuBLAS and cuBLASLt split k; a shorter k is
// one unsplit cuBLASLt kernel already (Note [One kernel for small products] in lt_matmul.cpp). k is at most
// kTinyMaxK: one block walks a whole row of a and column of b, and beyond a few hundred KiB of them the extra kernels
// of a split pay for themselves. Only the row sums are fused; a bias or ReLU takes the other paths. A TF32 product is
// computed in full float32 here (more precise than it asks for); a BFloat16 one reads its bfloat16 operands.
constexpr int64_t kTinyOutput = 1024;
constexpr int64_t kTinyMinK = 256;
constexpr int64_t kTinyMaxK = int64_t{1} << 16;

bool takes_tiny_product(int64_t m, int64_t n, int64_t k, const backend::GemmOptions& options) {
  return !options.bias.defined() && !options.relu && m * n <= kTinyOutput && k >= kTinyMinK && k <= kTinyMaxK;
}

// Note [Short products] (small_products.h) says why; this is which products take short_product. k is at most
// kShortMaxK, so that a thread's sum is a short loop over operands that the cache holds; the output at most
// kShortMaxOutput elements (4 MiB), where a product is a few microseconds and the launch counts; a larger one has tiles
// enough for cuBLAS's tensor-core kernels. Bias and ReLU are fused; row sums are not (a weight gradient's k is the
// batch, never short). As with tiny products, a TF32 product is computed in full float32 and a BFloat16 one reads
// bfloat16.
constexpr int64_t kShortMaxK = 32;
constexpr int64_t kShortMaxOutput = int64_t{1} << 20;

bool takes_short_product(int64_t m, int64_t n, int64_t k, const backend::GemmOptions& options) {
  return !options.a_row_sums.defined() && k <= kShortMaxK && m * n <= kShortMaxOutput;
}

// Which of tandem's own kernels takes a product, if one does.
enum class OwnKernel { None, Tiny, Short };

OwnKernel own_kernel_for(const Tensor& a, const backend::GemmOptions& options, const Tensor& out) {
  const int64_t m = out.size(0);
  const int64_t n = out.size(1);
  const int64_t k = a.size(1);
  if (m == 0 || n == 0 || k == 0) return OwnKernel::None;
  if (takes_tiny_product(m, n, k, options)) return OwnKernel::Tiny;
  if (takes_short_product(m, n, k, options)) return OwnKernel::Short;
  return OwnKernel::None;
}

OwnKernel own_kernel_for(const backend::GemmCall& call) { return own_kernel_for(call.a, call.options, call.out); }

kernels::SmallProduct small_product(const backend::GemmCall& call) {
  return small_product(call.a, call.b, call.options, call.out);
}

// Computes the product in one of tandem's own kernels, if one takes it; false otherwise.
bool own_kernel_product(const Tensor& a, const Tensor& b, const backend::GemmOptions& options, const Tensor& out,
                        int device) {
  switch (own_kernel_for(a, options, out)) {
    case OwnKernel::Tiny:
      kernels::tiny_product(small_product(a, b, options, out), compute_stream(device));
      return true;
    case OwnKernel::Short:
      kernels::short_product(small_product(a, b, options, out), compute_stream(device));
      return true;
    case OwnKernel::None:
      return false;
  }
  return false;
}

// Runs a short and a tiny product of one operand type in one kernel (Note [Paired small products]); false when the
// pair is not one.
bool paired_small_products(const backend::GemmCall& first, const backend::GemmCall& second, int device) {
  if (first.a.dtype() != second.a.dtype()) return false;
  const OwnKernel first_kernel = own_kernel_for(first);
  const OwnKernel second_kernel = own_kernel_for(second);
  if (first_kernel == OwnKernel::Short && second_kernel == OwnKernel::Tiny) {
    kernels::short_and_tiny_product(small_product(first), small_product(second), compute_stream(device));
    return true;
  }
  if (first_kernel == OwnKernel::Tiny && second_kernel == OwnKernel::Short) {
    kernels::short_and_tiny_product(small_product(second), small_product(first), compute_stream(device));
    return true;
  }
  return false;
}

// Note [TF32 operands along k]: a linear layer's weight gradient g^T x reads both operands across their rows: k is
// the batch, and a = g^T is the transpose of the row-major output gradient (strided along k), as b = x is (k its row
// index). Hopper's TF32 tensor-core instructions read operands from shared memory only laid out along k (CUTLASS
// lists its Hopper TF32 kernels for that layout alone; 16-bit types take either), and cuBLAS's TF32 kernel for this
// pair of layouts is much slower than for a row-major a (docs/benchmarks.md, "Design measurements"). So for a TF32
// product whose a is a transposed view and whose output is wide enough to pay for it, a is first copied row-major (a
// tiled transpose, Note [Transposing copies] in elementwise.cu) and the product reads the copy. cuBLASLt has no
// bias-gradient epilogue for a row-major a, and a row-sum kernel of its own is slower than the epilogue, so the
// copy's pass sums the rows as it goes. The copy's cost grows with m * k and the saving with m * n * k, so the output's
// width n decides. float32 and bfloat16 products read either layout at full speed and are left alone.
constexpr int64_t kTf32CopyMinColumns = 1024;

// a is a transposed view (Backend::gemm's other operand layout, row-major, reads along k already).
bool takes_k_major_copy(const Tensor& a, const backend::GemmOptions& options, const Tensor& out) {
  return options.precision == Precision::TF32 && a.dtype() == DType::Float32 && a.size(0) > 1 && a.size(1) > 1 &&
         a.strides()[0] == 1 && a.strides()[1] != 1 && out.size(1) >= kTf32CopyMinColumns;
}

// The product through a row-major copy of a (Note [TF32 operands along k]); the row sums, when asked for, come out of
// the copy's pass as sums per tile of columns (Note [Transposing copies] in elementwise.cu), then one small reduction.
void product_of_row_major_copy(const Tensor& a, const Tensor& b, const backend::GemmOptions& options, const Tensor& out,
                               int device) {
  const int64_t m = a.size(0);
  const int64_t k = a.size(1);
  const cudaStream_t stream = compute_stream(device);
  const Tensor rows = Tensor::empty(a.shape(), DType::Float32, a.device());
  backend::GemmOptions product = options;
  Tensor tile_sums;
  if (options.a_row_sums.defined()) {
    tile_sums = Tensor::empty({kernels::transpose_tiles(k), m}, DType::Float32, a.device());
    product.a_row_sums = Tensor();
  }
  kernels::transpose(a.data(), m, k, a.strides()[1], rows.mutable_data(),
                     backend::mutable_data_or_null(tile_sums), stream);
  if (tile_sums.defined()) {
    kernels::sum_dim(tile_sums.data(), options.a_row_sums.mutable_data(), 1, tile_sums.size(0), m, stream);
  }
  if (lt_matmul(rows, b, product, out, device)) return;
  gemm_in_passes(rows, b, product, out, device);
}

}  // namespace

void gemm(const Tensor& a, const Tensor& b, const backend::GemmOptions& options, const Tensor& out, int device) {
  if (own_kernel_product(a, b, options, out, device)) return;
  if (takes_k_major_copy(a, options, out)) {
    product_of_row_major_copy(a, b, options, out, device);
    return;
  }
  if (lt_matmul(a, b, options, out, device)) return;
  gemm_in_passes(a, b, options, out, device);
}

void gemm_batched(const Tensor& a, const Tensor& b, Precision precision, const Tensor& out, int device) {
  const int64_t count = out.size(0);
  const int64_t m = out.size(1);
  const int64_t n = out.size(2);
  const int64_t k = a.size(2);
  if (out.numel() == 0) return;
  if (k == 0) {
    kernels::fill(out.mutable_data(), collapse_dims(out.shape(), {&out.strides()}), 0.0f, compute_stream(device));
    return;
  }
  // Note [Row-major operands] (gemm_operand.h), matrix by matrix: out[i]^T = b[i]^T @ a[i]^T.
  const Operand left = transposed_operand(b, "b");
  const Operand right = transposed_operand(a, "a");
  const cudaDataType_t type = operand_type(precision);
  const float alpha = 1.0f;
  const float beta = 0.0f;
  TANDEM_CUBLAS_CHECK(cublasGemmStridedBatchedEx(
      cublas_handle(device), left.op, right.op, to_int(n, "n"), to_int(m, "m"), to_int(k, "k"), &alpha, b.data_ptr(),
      type, to_int(left.ld, "b leading dimension"), b.strides()[0], a.data_ptr(), type,
      to_int(right.ld, "a leading dimension"), a.strides()[0], &beta, out.mutable_data(), CUDA_R_32F,
      to_int(n, "n"), m * n, to_int(count, "the batch count"), compute_type(precision), CUBLAS_GEMM_DEFAULT));
}

void gemm_pair(const backend::GemmCall& first, const backend::GemmCall& second, int device) {
  if (paired_small_products(first, second, device)) return;
  gemm(first.a, first.b, first.options, first.out, device);
  gemm(second.a, second.b, second.options, second.out, device);
}

}  // namespace tandem::cuda
