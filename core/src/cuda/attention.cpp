// Backend::attention_forward / attention_backward on CUDA: the call's tensors as kernel arguments, then the float32 or
// the bfloat16 kernels (Note [Fused attention] in cuda/attention.h).
#include "cuda/attention.h"

#include "allocator.h"
#include "cuda/convert.h"
#include "cuda/strided_layout.h"
#include "tandem/core/cuda/context.h"

namespace tandem::cuda {
namespace {

kernels::AttentionLayout layout_of(const Tensor& t) {
  return {t.size(1), t.strides()[0], t.strides()[1], t.strides()[2]};
}

kernels::AttentionOperand operand_of(const Tensor& t) {
  kernels::AttentionOperand operand;
  static_cast<kernels::AttentionLayout&>(operand) = layout_of(t);
  operand.data = t.data_ptr();
  return operand;
}

kernels::AttentionProblem problem_of(const backend::AttentionCall& call, const Tensor& out) {
  kernels::AttentionProblem p;
  p.out = layout_of(out);
  p.q = operand_of(call.q);
  p.k = operand_of(call.k);
  p.v = operand_of(call.v);
  p.batches = call.q.size(0) * call.q.size(1);
  p.L = static_cast<int>(call.q.size(2));
  p.S = static_cast<int>(call.k.size(2));
  p.E = static_cast<int>(call.q.size(3));
  p.scale = call.scale;
  p.causal = call.causal;
  p.bfloat16 = call.q.dtype() == DType::BFloat16;
  p.dropout = call.dropout;
  return p;
}

// The backward's D = rowsum(dO * O), one float per query row, in caching-allocator memory that is released as soon as
// the kernels that use it are enqueued (Note [Stream-ordered reuse]: the block is handed out again only to work
// enqueued after them on this stream).
class RowDots {
 public:
  RowDots(int device, int64_t rows)
      : device_(device), ptr_(static_cast<float*>(alloc::cuda_allocate(device, static_cast<size_t>(rows) * 4))) {}
  ~RowDots() { alloc::cuda_free(device_, ptr_); }
  RowDots(const RowDots&) = delete;
  RowDots& operator=(const RowDots&) = delete;
  float* data() const { return ptr_; }

 private:
  int device_;
  float* ptr_;
};

// t = 0: one memset where t is dense (its elements fill numel() places from its start), else the strided fill (a
// gradient of packed heads: Note [Gradients of packed heads] in ops/attention_ops.cpp).
void zero(const Tensor& t, cudaStream_t stream) {
  if (t.numel() == 0) return;
  if (dense_strides_like(t.shape(), t.strides()) == t.strides()) {
    TANDEM_CUDA_CHECK(cudaMemsetAsync(t.mutable_data(), 0, t.numel() * sizeof(float), stream));
  } else {
    kernels::fill_bits(t.mutable_data(), DType::Float32, collapse_dims(t.shape(), {&t.strides()}), 0, stream);
  }
}

}  // namespace

void attention_forward(const backend::AttentionCall& call, const Tensor& out, const Tensor& lse, cudaStream_t stream) {
  const kernels::AttentionProblem p = problem_of(call, out);
  if (p.batches == 0 || p.L == 0) return;
  const bool out_bfloat16 = out.dtype() == DType::BFloat16;
  if (p.bfloat16) {
    kernels::attention_forward_mma(p, out.mutable_data_ptr(), out_bfloat16, lse.mutable_data(), stream);
  } else {
    kernels::attention_forward_simt(p, out.mutable_data_ptr(), out_bfloat16, lse.mutable_data(), stream);
  }
}

void attention_backward(const backend::AttentionCall& call, const Tensor& out, const Tensor& grad_out,
                        const Tensor& lse, const Tensor& grad_q, const Tensor& grad_k, const Tensor& grad_v,
                        cudaStream_t stream) {
  kernels::AttentionProblem p = problem_of(call, out);
  p.dq = layout_of(grad_q);
  p.dk = layout_of(grad_k);
  p.dv = layout_of(grad_v);
  zero(grad_q, stream);                    // dq is accumulated into
  if (p.batches == 0 || p.S == 0) return;  // dk and dv are empty
  if (p.L == 0) {                          // no query sees a key
    zero(grad_k, stream);
    zero(grad_v, stream);
    return;
  }
  const kernels::AttentionOperand dout = operand_of(grad_out);
  const RowDots dots(grad_q.device().index(), p.batches * p.L);
  kernels::attention_row_dots(p, dout, out.data_ptr(), out.dtype() == DType::BFloat16, dots.data(), stream);
  const auto backward = p.bfloat16 ? kernels::attention_backward_mma : kernels::attention_backward_simt;
  backward(p, dout, lse.data(), dots.data(), grad_q.mutable_data(), grad_k.mutable_data(), grad_v.mutable_data(),
           stream);
}

}  // namespace tandem::cuda
