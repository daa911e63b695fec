// The CUDA backend: cuBLAS and cuBLASLt for matrix products (gemm.cpp, with small_products.cu), own kernels for the
// rest (elementwise.cu, reductions.cu, layer_norm.cu, optimizer_updates.cu, image_kernels.cu). Every call makes the
// tensors' device current and enqueues its work on that device's compute stream (Note [Streams] in context.h),
// except the optimizers' list updates asked to run on the communication stream; only the host transfers wait for
// the device.

#include <cuda_runtime.h>

#include "allocator.h"
#include "backend.h"
#include "cuda/attention.h"
#include "cuda/convert.h"
#include "cuda/elementwise.h"
#include "cuda/gemm.h"
#include "cuda/image_kernels.h"
#include "cuda/layer_norm.h"
#include "cuda/optimizer_updates.h"
#include "cuda/reductions.h"
#include "cuda/strided_layout.h"
#include "cuda/uniform_fill.h"
#include "tandem/core/cuda/context.h"

namespace tandem::cuda {
namespace {

// The device of one backend call, current while the call runs, and its compute stream.
struct OnDevice {
  explicit OnDevice(const Tensor& t) : device(t.device().index()), guard(device), stream(compute_stream(device)) {}
  int device;
  DeviceGuard guard;
  cudaStream_t stream;
};

// The stream an optimizer update chose (Note [Updates on the communication stream] in fused.h).
cudaStream_t stream_for(const OnDevice& on, UpdateStream stream) {
  return stream == UpdateStream::Communication ? comm_stream(on.device) : on.stream;
}

// Device scratch memory for one launch. It is released as soon as the launch is enqueued: the caching allocator
// hands the block out again only to work enqueued after it on the same stream (Note [Stream-ordered reuse]).
class Scratch {
 public:
  Scratch(int device, int64_t floats)
      : device_(device),
        ptr_(floats > 0 ? alloc::cuda_allocate(device, static_cast<size_t>(floats) * sizeof(float)) : nullptr) {}
  ~Scratch() { alloc::cuda_free(device_, ptr_); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  float* data() const { return static_cast<float*>(ptr_); }

 private:
  int device_;
  void* ptr_;
};

using backend::data_or_null;
using backend::mutable_data_or_null;

kernels::LayerNormArgs layer_norm_args(const backend::LayerNormCall& call) {
  return {call.x.data(), data_or_null(call.weight), data_or_null(call.bias), call.rows, call.cols, call.eps};
}

size_t nbytes_of(const Tensor& t) { return static_cast<size_t>(t.numel()) * element_size(t.dtype()); }

void sum_contiguous(const OnDevice& on, const float* x, int64_t n, float scale, float* out) {
  Scratch scratch(on.device, kernels::reduce_scratch_floats(n));
  kernels::sum_all(x, n, scale, out, scratch.data(), on.stream);
}

class CudaBackend final : public backend::Backend {
 public:
  void fill(const Tensor& out, float value) override {
    if (out.numel() == 0) return;
    OnDevice on(out);
    kernels::fill(out.mutable_data(), collapse_dims(out.shape(), {&out.strides()}), value, on.stream);
  }

  void fill_bits(const Tensor& out, uint64_t bits) override {
    if (out.numel() == 0) return;
    OnDevice on(out);
    kernels::fill_bits(out.mutable_data_ptr(), out.dtype(), collapse_dims(out.shape(), {&out.strides()}), bits,
                       on.stream);
  }

  void triangle_mask(int64_t diagonal, bool lower, const Tensor& out) override {
    if (out.numel() == 0) return;
    OnDevice on(out);
    kernels::triangle_mask(out.size(0), out.size(1), diagonal, lower, out.mutable_data(), on.stream);
  }

  void copy(const Tensor& src, const Tensor& dst) override {
    if (dst.numel() == 0) return;
    OnDevice on(dst);
    if (src.dtype() != DType::Float32 || dst.dtype() != DType::Float32) {
      kernels::convert(src.data_ptr(), src.dtype(), dst.mutable_data_ptr(), dst.dtype(),
                       collapse_dims(dst.shape(), {&dst.strides(), &src.strides()}), on.stream);
      return;
    }
    kernels::copy(src.data(), dst.mutable_data(), collapse_dims(dst.shape(), {&dst.strides(), &src.strides()}),
                  on.stream);
  }

  void gemm(const Tensor& a, const Tensor& b, const backend::GemmOptions& options, const Tensor& out) override {
    OnDevice on(out);
    cuda::gemm(a, b, options, out, on.device);
  }

  void gemm_pair(const backend::GemmCall& first, const backend::GemmCall& second) override {
    OnDevice on(first.out);
    cuda::gemm_pair(first, second, on.device);
  }

  void gemm_batched(const Tensor& a, const Tensor& b, Precision precision, const Tensor& out) override {
    OnDevice on(out);
    cuda::gemm_batched(a, b, precision, out, on.device);
  }

  void sum_dim(const Tensor& x, int64_t dim, const Tensor& out) override {
    if (out.numel() == 0) return;
    OnDevice on(out);
    const Shape& shape = x.shape();
    int64_t outer = 1;
    int64_t inner = 1;
    for (int64_t d = 0; d < dim; ++d) outer *= shape[d];
    for (int64_t d = dim + 1; d < static_cast<int64_t>(shape.size()); ++d) inner *= shape[d];
    if (outer == 1 && inner == 1) {
      sum_contiguous(on, x.data(), shape[dim], 1.0f, out.mutable_data());
    } else {
      kernels::sum_dim(x.data(), out.mutable_data(), outer, shape[dim], inner, on.stream);
    }
  }

  void sum_all(const Tensor& x, float scale, const Tensor& out) override {
    OnDevice on(out);
    sum_contiguous(on, x.data(), x.numel(), scale, out.mutable_data());
  }

  void broadcast_scalar(const Tensor& scalar, float scale, const Tensor& out) override {
    if (out.numel() == 0) return;
    OnDevice on(out);
    kernels::broadcast_scalar(scalar.data(), scale, out.mutable_data(), out.numel(), on.stream);
  }

  void layer_norm_forward(const backend::LayerNormCall& call, const Tensor& out, const Tensor& mean,
                          const Tensor& rstd) override {
    if (call.rows == 0) return;
    OnDevice on(out);
    kernels::layer_norm_forward(layer_norm_args(call), out.mutable_data(), mean.mutable_data(), rstd.mutable_data(),
                                on.stream);
  }

  void layer_norm_backward(const backend::LayerNormCall& call, const Tensor& grad_out, const Tensor& mean,
                           const Tensor& rstd, const Tensor& grad_x, const Tensor& grad_weight,
                           const Tensor& grad_bias) override {
    if (call.rows == 0) {  // sums over no rows
      if (grad_weight.defined()) fill(grad_weight, 0.0f);
      if (grad_bias.defined()) fill(grad_bias, 0.0f);
      return;
    }
    OnDevice on(grad_out);
    const bool parameters = grad_weight.defined() || grad_bias.defined();
    Scratch scratch(on.device, parameters ? kernels::layer_norm_scratch_floats(call.rows, call.cols) : 0);
    kernels::layer_norm_backward(layer_norm_args(call), grad_out.data(), mean.data(), rstd.data(),
                                 mutable_data_or_null(grad_x), mutable_data_or_null(grad_weight),
                                 mutable_data_or_null(grad_bias), scratch.data(), on.stream);
  }

  void mse_forward(const Tensor& input, const Tensor& target, const Tensor& out) override {
    OnDevice on(out);
    const int64_t n = input.numel();
    Scratch scratch(on.device, kernels::reduce_scratch_floats(n));
    kernels::mse_forward(input.data(), target.data(), n, out.mutable_data(), scratch.data(), on.stream);
  }

  void mse_backward(const Tensor& grad, const Tensor& input, const Tensor& target,
                    const Tensor& grad_input) override {
    if (grad_input.numel() == 0) return;
    OnDevice on(grad_input);
    kernels::mse_backward(grad.data(), input.data(), target.data(), grad_input.mutable_data(), grad_input.numel(),
                          on.stream);
  }

  void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
                  const backend::SgdUpdate& update, const Tensor& lr) override {
    if (param.numel() == 0) return;
    const bool uses_buffer = update.momentum != 0.0f;
    // sgd_update (fused.cpp) checks the buffer before it calls the backend.
    TANDEM_INTERNAL_ASSERT(!uses_buffer || momentum_buffer.defined(), "sgd_update: momentum is ", update.momentum,
                           " but no momentum buffer was given");
    OnDevice on(param);
    kernels::sgd_update(param.mutable_data(), grad.data(), uses_buffer ? momentum_buffer.mutable_data() : nullptr,
                        param.numel(), update, data_or_null(lr), on.stream);
  }

  void adam_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                   const Tensor& max_exp_avg_sq, const backend::AdamUpdate& update,
                   const Tensor& step_factors) override {
    if (param.numel() == 0) return;
    // adam_update (fused.cpp) checks the buffers before it calls the backend.
    TANDEM_INTERNAL_ASSERT(!update.amsgrad || max_exp_avg_sq.defined(),
                           "adam_update: amsgrad without a max_exp_avg_sq buffer");
    OnDevice on(param);
    kernels::adam_update(param.mutable_data(), grad.data(), exp_avg.mutable_data(), exp_avg_sq.mutable_data(),
                         update.amsgrad ? max_exp_avg_sq.mutable_data() : nullptr, param.numel(), update,
                         data_or_null(step_factors), on.stream);
  }

  // Note [Updates on the communication stream] in fused.h: the list forms run on the stream the caller chose.
  void sgd_update(const std::vector<backend::SgdParameter>& parameters, UpdateStream stream) override {
    std::vector<kernels::SgdEntry> entries;
    entries.reserve(parameters.size());
    for (const backend::SgdParameter& p : parameters) {
      const bool uses_buffer = p.update.momentum != 0.0f;
      entries.push_back({.param = p.param.mutable_data(),
                         .grad = p.grad.data(),
                         .momentum_buffer = uses_buffer ? p.momentum_buffer.mutable_data() : nullptr,
                         .lr = data_or_null(p.lr),
                         .n = p.param.numel(),
                         .update = p.update});
    }
    OnDevice on(parameters.front().param);
    kernels::sgd_update(entries, stream_for(on, stream));
  }

  void adam_update(const std::vector<backend::AdamParameter>& parameters, UpdateStream stream) override {
    std::vector<kernels::AdamEntry> entries;
    entries.reserve(parameters.size());
    for (const backend::AdamParameter& p : parameters) {
      entries.push_back({.param = p.param.mutable_data(),
                         .grad = p.grad.data(),
                         .exp_avg = p.exp_avg.mutable_data(),
                         .exp_avg_sq = p.exp_avg_sq.mutable_data(),
                         .max_exp_avg_sq = p.update.amsgrad ? p.max_exp_avg_sq.mutable_data() : nullptr,
                         .step_factors = data_or_null(p.step_factors),
                         .n = p.param.numel(),
                         .update = p.update});
    }
    OnDevice on(parameters.front().param);
    kernels::adam_update(entries, stream_for(on, stream));
  }

  void attention_forward(const backend::AttentionCall& call, const Tensor& out, const Tensor& lse) override {
    OnDevice on(out);
    cuda::attention_forward(call, out, lse, on.stream);
  }

  void attention_backward(const backend::AttentionCall& call, const Tensor& out, const Tensor& grad_out,
                          const Tensor& lse, const Tensor& grad_q, const Tensor& grad_k,
                          const Tensor& grad_v) override {
    OnDevice on(out);
    cuda::attention_backward(call, out, grad_out, lse, grad_q, grad_k, grad_v, on.stream);
  }

  void im2col(const Tensor& input, const backend::Conv2dWindows& windows, const Tensor& cols) override {
    OnDevice on(cols);
    kernels::im2col(input.data(), windows, cols.mutable_data(), on.stream);
  }

  void col2im(const Tensor& cols, const backend::Conv2dWindows& windows, const Tensor& grad_input) override {
    OnDevice on(grad_input);
    kernels::col2im(cols.data(), windows, grad_input.mutable_data(), on.stream);
  }

  void max_pool2d(const Tensor& input, const backend::Pool2dWindows& windows, const Tensor& out,
                  const Tensor& indices) override {
    OnDevice on(out);
    kernels::max_pool2d(input.data(), windows, out.mutable_data(), indices.mutable_data_as<int64_t>(), on.stream);
  }

  void max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, const backend::Pool2dWindows& windows,
                           const Tensor& grad_input) override {
    OnDevice on(grad_input);
    kernels::max_pool2d_backward(grad_out.data(), indices.data_as<int64_t>(), windows, grad_input.mutable_data(),
                                 on.stream);
  }

  void avg_pool2d(const Tensor& input, const backend::Pool2dWindows& windows, const Tensor& out) override {
    OnDevice on(out);
    kernels::avg_pool2d(input.data(), windows, out.mutable_data(), on.stream);
  }

  void avg_pool2d_backward(const Tensor& grad_out, const backend::Pool2dWindows& windows,
                           const Tensor& grad_input) override {
    OnDevice on(grad_input);
    kernels::avg_pool2d_backward(grad_out.data(), windows, grad_input.mutable_data(), on.stream);
  }

  void vector_norm(const Tensor& x, double ord, const Tensor& out) override {
    OnDevice on(out);
    Scratch scratch(on.device, kernels::reduce_scratch_floats(x.numel()));
    kernels::vector_norm(x.data(), x.numel(), ord, out.mutable_data(), scratch.data(), on.stream);
  }

  void apply_dropout(const Tensor& x, const detail::DropoutMask& mask, const Tensor& out) override {
    if (x.numel() == 0) return;
    OnDevice on(out);
    kernels::apply_dropout(x.data(), out.mutable_data(), x.numel(), mask, on.stream);
  }

  void clip_by_norm(const Tensor& x, const Tensor& norm, float max_norm) override {
    if (x.numel() == 0) return;
    OnDevice on(x);
    kernels::clip_by_norm(x.mutable_data(), x.numel(), norm.data(), max_norm, on.stream);
  }

  // Note [Host transfers]: both directions are enqueued on the compute stream, so they are ordered after the
  // producers of the device memory and before its later users, and both wait for that stream before returning:
  // to_host because the caller reads the values, from_host because cudaMemcpyAsync may still be reading a pageable
  // host buffer when it returns, and the caller may free that buffer as soon as from_host returns.
  void to_host(const Tensor& src, void* host) override {
    const size_t nbytes = nbytes_of(src);
    if (nbytes == 0) return;
    OnDevice on(src);
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(host, src.data_ptr(), nbytes, cudaMemcpyDeviceToHost, on.stream));
    TANDEM_CUDA_CHECK(cudaStreamSynchronize(on.stream));
    backend::cuda_raise_index_fault(on.device);  // Note [Index checks on the device] in backend.h
  }

  void from_host(const void* host, const Tensor& dst) override {
    const size_t nbytes = nbytes_of(dst);
    if (nbytes == 0) return;
    OnDevice on(dst);
    TANDEM_CUDA_CHECK(cudaMemcpyAsync(dst.mutable_data_ptr(), host, nbytes, cudaMemcpyHostToDevice, on.stream));
    TANDEM_CUDA_CHECK(cudaStreamSynchronize(on.stream));
  }

  void pointwise(const backend::PointwiseCall& call, const std::vector<Tensor>& inputs, const Tensor& out) override {
    if (out.numel() == 0) return;
    OnDevice on(out);
    const float* pointers[kernels::kMaxOperands - 1] = {};
    std::vector<const Shape*> strides = {&out.strides()};
    for (size_t k = 0; k < inputs.size(); ++k) {
      pointers[k] = inputs[k].data();
      strides.push_back(&inputs[k].strides());
    }
    kernels::pointwise(call, pointers, out.mutable_data(), collapse_dims(out.shape(), strides), on.stream);
  }

  void reduce_dim(backend::ReduceOp op, const Tensor& x, int64_t outer, int64_t reduce, int64_t inner,
                  const Tensor& values, const Tensor& indices) override {
    if (values.numel() == 0) return;
    OnDevice on(values);
    kernels::reduce_dim(op, x.data(), outer, reduce, inner, values.mutable_data(),
                        indices.defined() ? indices.mutable_data_as<int64_t>() : nullptr, on.stream);
  }

  void gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) override {
    if (out.numel() == 0) return;
    OnDevice on(out);
    const Shape base = strides_without(x, dim);
    kernels::gather(x.data(), x.size(dim), x.strides()[dim], index.data_as<int64_t>(), out.mutable_data(),
                    collapse_dims(index.shape(), {&out.strides(), &index.strides(), &base}), on.stream);
  }

  void scatter_add(const Tensor& src, int64_t dim, const Tensor& index, const Tensor& target) override {
    if (src.numel() == 0) return;
    OnDevice on(target);
    const Shape base = strides_without(target, dim);
    kernels::scatter_add(src.data(), target.size(dim), target.strides()[dim], index.data_as<int64_t>(),
                         target.mutable_data(),
                         collapse_dims(index.shape(), {&src.strides(), &index.strides(), &base}), on.stream);
  }

 private:
  // t's strides with 0 at dim: the offset of a position with its coordinate at dim dropped.
  static Shape strides_without(const Tensor& t, int64_t dim) {
    Shape strides = t.strides();
    strides[dim] = 0;
    return strides;
  }
};

}  // namespace
}  // namespace tandem::cuda

namespace tandem::backend {

Backend& cuda() {
  static tandem::cuda::CudaBackend backend;
  return backend;
}

}  // namespace tandem::backend
