#pragma once
// Autocast: a per-thread scope in which matrix products given no precision of their own run in bfloat16 mixed
// precision, as torch.autocast(device_type, dtype=torch.bfloat16) does for matmul, bmm, linear and attention.
//
//   {
//     AutocastGuard autocast(DType::BFloat16);
//     Tensor loss = nn::cross_entropy(model->forward(x), y);   // products in bf16, softmax and losses in float32
//   }
//   loss.backward();                                           // each product's backward in the precision it ran in
//
// Note [Autocast as a precision]: tandem's mixed precision rounds the inputs of a product and keeps everything else
// float32 (Note [Precision modes] in precision.h), so autocast needs no casts of activations or weights: inside the
// scope, default_precision() (what matmul(), linear() without a precision, nn::Linear and attention of a module with
// no precision set use) is Precision::BFloat16. What autocast keeps in float32 in PyTorch (softmax, normalization,
// losses, reductions) is float32 here anyway. A precision given explicitly (to linear(), or to a module with
// nn::Module::set_precision, Float32 included) wins over the scope, as it wins over allow_tf32(). A product records
// its precision when it is recorded, so the backward, which runs after the scope has ended, uses the forward's.
// The scope belongs to the thread that opens it; parallel::parallel_apply, data_parallel and the training steps run
// their replicas with the caller's autocast state, as PyTorch's parallel_apply does (and as they inherit grad mode).

#include <optional>

#include "tandem/core/dtype.h"
#include "tandem/core/precision.h"

namespace tandem {

// The calling thread's autocast precision: Precision::BFloat16 inside an AutocastGuard(DType::BFloat16), none
// outside any guard or inside an AutocastGuard(DType::Float32).
std::optional<Precision> autocast_precision();

// While alive, the calling thread autocasts to `dtype`: DType::BFloat16 turns autocast on, DType::Float32 turns it
// off (as torch.autocast(enabled=False) inside an outer scope). Guards nest; each restores the state it found.
// Errors: any other dtype.
class AutocastGuard {
 public:
  explicit AutocastGuard(DType dtype);
  ~AutocastGuard();
  AutocastGuard(const AutocastGuard&) = delete;
  AutocastGuard& operator=(const AutocastGuard&) = delete;

 private:
  std::optional<Precision> previous_;
};

namespace detail {
// Sets the precision that the calling thread's products given none take (default_precision()) while alive, any
// precision or none: parallel workers take their caller's autocast state with it, and a module with a precision of
// its own (nn::MultiheadAttention) gives it to the products of the ops it calls.
class AutocastStateGuard {
 public:
  explicit AutocastStateGuard(std::optional<Precision> precision);
  ~AutocastStateGuard();
  AutocastStateGuard(const AutocastStateGuard&) = delete;
  AutocastStateGuard& operator=(const AutocastStateGuard&) = delete;

 private:
  std::optional<Precision> previous_;
};
}  // namespace detail

}  // namespace tandem
