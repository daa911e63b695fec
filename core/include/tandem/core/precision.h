#pragma once
// Precision: how a matrix product multiplies. Outputs, master weights, gradients and optimizer state are float32 in
// every mode; only the inputs of the product are rounded.
//
// Note [Precision modes]:
//   Float32  ("fp32")  float32 inputs, float32 products and sums.
//   TF32     ("tf32")  inputs with 10 mantissa bits, float32 sums. CUDA: cuBLAS's TF32 tensor-op math
//                      (CUBLAS_COMPUTE_32F_FAST_TF32). CPU: each input rounded to 10 mantissa bits (to nearest,
//                      ties to even), then the float32 product, whose products of two such inputs are exact.
//   BFloat16 ("bf16")  mixed precision: inputs rounded to bfloat16 (to nearest, ties to even, as BFloat16 does),
//                      float32 sums and outputs. CUDA: bfloat16 operands with float32 accumulation and output
//                      (cuBLASLt, or cublasGemmEx where cuBLASLt has no kernel). CPU: the same rounding, then the
//                      float32 product (a product of two bfloat16 values is exact in float32).
// linear() and linear_relu() (ops.h) take a precision, and nn::Module::set_precision gives one to every layer of a
// model that multiplies matrices (nn::Linear). Where none is given, a product follows the process-wide switch of
// matmul_settings.h: the thread's autocast scope (AutocastGuard, autocast.h) when one is open, else TF32 when
// allow_tf32(), else Float32 (default_precision()). A precision given explicitly wins over both, Float32 included.
// matmul() always follows default_precision().

#include <cstdint>
#include <iosfwd>
#include <string_view>

namespace tandem {

enum class Precision : uint8_t { Float32, TF32, BFloat16 };

const char* precision_name(Precision precision);  // "fp32", "tf32", "bf16"
// The precision named `name` ("fp32", "tf32" or "bf16"). Errors: any other name (quoted in the message).
Precision parse_precision(std::string_view name);
std::ostream& operator<<(std::ostream& os, Precision precision);  // precision_name

}  // namespace tandem
