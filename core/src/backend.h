#pragma once
// The compute backend interface: one implementation per device type, exactly one compiled in for each
// (cpu/ = Eigen; cuda/ = cuBLAS + own kernels, or a stub that throws when tandem is built without CUDA).
// Code above this interface (core/src/*.cpp) allocates outputs, checks shapes, devices and dtypes, and handles
// autograd; a backend only computes. All tensors passed to one call live on one device of the backend's type. Every
// tensor is float32 except where a contract below says "any dtype" (Note [Dtypes of ops] in raw_ops.h) and the
// bfloat16 operands of a BFloat16 product (gemm).

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include "draw_place.h"
#include "kernel_ops.h"
#include "sliding_windows.h"
#include "tandem/core/fused.h"
#include "tandem/core/precision.h"
#include "tandem/core/stream_marker.h"
#include "tandem/core/tensor.h"

namespace tandem::backend {

using tandem::AdamParameter;
using tandem::AdamUpdate;
using tandem::SgdParameter;
using tandem::SgdUpdate;
using tandem::UpdateStream;

// What one matrix product (Backend::gemm) fuses with the product itself, and how it multiplies. bias is never
// combined with accumulate or a_row_sums; neither is relu.
struct GemmOptions {
  Tensor bias{};            // defined: [n], contiguous; added to every row of the product
  Tensor a_row_sums{};      // defined: [m], contiguous; receives the sums of a's rows over k (the bias gradient of a
                            // linear layer, from its weight-gradient product g^T x), of a's values as stored
  bool accumulate = false;  // add the product to out's values instead of replacing them
  bool relu = false;        // out = max(product + bias, 0), NaN kept (a linear layer followed by ReLU)
  // Note [Precision modes] in tandem/core/precision.h. BFloat16: a and b are bfloat16 (the caller rounds them);
  // otherwise both are float32. out is float32 either way.
  Precision precision = Precision::Float32;
};

// The data of an optional operand: nullptr when t is undefined (a kernel argument that may be absent).
inline const float* data_or_null(const Tensor& t) { return t.defined() ? t.data() : nullptr; }
inline float* mutable_data_or_null(const Tensor& t) { return t.defined() ? t.mutable_data() : nullptr; }

// One fused attention call (Backend::attention_forward / attention_backward; Note [Fused attention] in
// cuda/attention.h): q [B1, B2, L, E], k and v [B1, B2, S, E] (each operand may split its N = B1 * B2 matrices
// differently, the matrices in the same row-major order), all of one dtype, float32 (products in float32) or
// bfloat16 (products of bfloat16 operands, float32 sums, as a BFloat16 gemm), each with stride 1 in its last dim,
// every other stride a multiple of 8 and a 16-byte aligned start (any batch and row strides otherwise: the views of
// x.reshape({B, T, H, E}).transpose(1, 2) are read in place). E is 32, 64 or 128. Softmax over scale * q k^T, keys
// after the query's position left out when causal (top left aligned).
struct AttentionCall {
  Tensor q, k, v;
  float scale = 1.0f;
  bool causal = false;
  // When active, probability P[n, i, j] (n the flat batch index) is multiplied by element (n L + i) S + j of the
  // mask: the mask that nn::dropout draws for the [..., L, S] weights from the same place.
  detail::DropoutMask dropout;
};

// One layer normalization (Backend::layer_norm_forward / layer_norm_backward): x contiguous, viewed as [rows, cols],
// each row normalized over its cols values; weight and bias contiguous [cols], or undefined for none (a weight of 1,
// a bias of 0). rows may be 0; cols >= 1.
struct LayerNormCall {
  Tensor x, weight, bias;
  int64_t rows = 0, cols = 0;
  float eps = 1e-5f;
};

// One product as Backend::gemm takes it, for gemm_pair.
struct GemmCall {
  Tensor a, b;
  GemmOptions options;
  Tensor out;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // out (any strides) = value
  virtual void fill(const Tensor& out, float value) = 0;
  // out (any strides, any dtype) = the element whose bit pattern is the low element_size(out.dtype()) bytes of bits
  virtual void fill_bits(const Tensor& out, uint64_t bits) = 0;
  // dst = src; same shape, any strides (src may have stride-0 broadcast dims), same device; any dtypes, converted as
  // Note [Conversions] (element_convert.h) says
  virtual void copy(const Tensor& src, const Tensor& dst) = 0;
  // out[m, n] = a[m, k] @ b[k, n], or out += a @ b with options.accumulate, plus what else `options` asks for, in
  // options.precision. a and b are 2-D and either row-major (stride(1) == 1) or transposed views (stride(0) == 1);
  // with options.a_row_sums, a is contiguous or the transpose of a contiguous tensor. out is contiguous. m, n or k
  // may be 0 (k = 0: the product is zero; the row sums are too).
  virtual void gemm(const Tensor& a, const Tensor& b, const GemmOptions& options, const Tensor& out) = 0;
  // Two products, each as gemm computes it, where neither reads or writes memory that the other writes (its out and
  // row sums); a backend may run them together (Note [Paired small products] in cuda/small_products.h).
  virtual void gemm_pair(const GemmCall& first, const GemmCall& second) {
    gemm(first.a, first.b, first.options, first.out);
    gemm(second.a, second.b, second.options, second.out);
  }
  // out[i] = a[i] @ b[i] for every i < B, in `precision` (as gemm multiplies, without an epilogue): a [B, m, k] and
  // b [B, k, n] with each matrix row-major or a transposed view (gemm's operand layouts, in the last two dims) and
  // any batch strides, 0 included (one matrix for every i); out contiguous [B, m, n]. m, n, k or B may be 0. The
  // default runs gemm on each matrix in turn (backend.cpp).
  virtual void gemm_batched(const Tensor& a, const Tensor& b, Precision precision, const Tensor& out);
  // out = sum of x over `dim`; x contiguous; out contiguous with x's shape minus `dim`
  virtual void sum_dim(const Tensor& x, int64_t dim, const Tensor& out) = 0;
  // out (shape {}) = scale * sum(x); x contiguous
  virtual void sum_all(const Tensor& x, float scale, const Tensor& out) = 0;
  // out (any shape, contiguous) = scale * scalar, where scalar is a one-element tensor on the device
  // (no host round trip: this is the backward of sum/mean)
  virtual void broadcast_scalar(const Tensor& scalar, float scale, const Tensor& out) = 0;
  // out ([B1, B2, L, E] in an operand's layout, float32 or bfloat16) = softmax(scale * q k^T with the causal mask) v,
  // and lse (contiguous float32, N * L) = each row's logsumexp of its scaled scores (-inf, and a NaN out, for a row
  // without keys). L, S or N may be 0.
  virtual void attention_forward(const AttentionCall& call, const Tensor& out, const Tensor& lse) = 0;
  // grad_q, grad_k, grad_v (float32, q's, k's and v's sizes, each in an operand's layout, not overlapping itself or
  // the others) = the gradients of sum(grad_out * out) for the forward's out and lse, the
  // softmax recomputed from lse. grad_out: q's dtype, [B1, B2, L, E] with an operand's layout (as q's); out: the
  // forward's.
  virtual void attention_backward(const AttentionCall& call, const Tensor& out, const Tensor& grad_out,
                                  const Tensor& lse, const Tensor& grad_q, const Tensor& grad_k,
                                  const Tensor& grad_v) = 0;
  // out (contiguous [rows, cols]) = (x - mean) * rstd * weight + bias per row, with mean and rstd (contiguous
  // [rows]) each row's mean and 1 / sqrt(biased variance + eps), also returned.
  virtual void layer_norm_forward(const LayerNormCall& call, const Tensor& out, const Tensor& mean,
                                  const Tensor& rstd) = 0;
  // The gradients of sum(grad_out * out) for the forward's mean and rstd (grad_out contiguous [rows, cols]): grad_x
  // ([rows, cols]) and grad_weight, grad_bias ([cols], sums over the rows in a fixed order), each contiguous and
  // overwritten, or undefined when not wanted.
  virtual void layer_norm_backward(const LayerNormCall& call, const Tensor& grad_out, const Tensor& mean,
                                   const Tensor& rstd, const Tensor& grad_x, const Tensor& grad_weight,
                                   const Tensor& grad_bias) = 0;
  // out (shape {}) = mean((input - target)^2); input, target contiguous with equal shapes
  virtual void mse_forward(const Tensor& input, const Tensor& target, const Tensor& out) = 0;
  // grad_input = grad * 2 / n * (input - target), grad a one-element tensor; all contiguous. Not a pointwise
  // function: the factor 2 * grad / n is formed in double from the grad in device memory.
  virtual void mse_backward(const Tensor& grad, const Tensor& input, const Tensor& target,
                            const Tensor& grad_input) = 0;
  // One fused SGD update over a contiguous parameter, its gradient and (when momentum != 0) its momentum buffer.
  // lr, when defined, is a one-element tensor on the device whose value replaces update.lr, read when the update runs
  // (Note [Hyper-parameters in device memory] in fused.h).
  virtual void sgd_update(const Tensor& param, const Tensor& grad, const Tensor& momentum_buffer,
                          const SgdUpdate& update, const Tensor& lr) = 0;
  // One fused Adam/AdamW update (fused.h) over a contiguous parameter, its gradient and its moments (and, when
  // update.amsgrad, the running maximum of exp_avg_sq); param and the moments are updated in place. step_factors,
  // when defined, holds param_scale, step_size and bias_correction2_sqrt on the device (contiguous), read in place of
  // update's when the update runs.
  virtual void adam_update(const Tensor& param, const Tensor& grad, const Tensor& exp_avg, const Tensor& exp_avg_sq,
                           const Tensor& max_exp_avg_sq, const AdamUpdate& update, const Tensor& step_factors) = 0;
  // The list forms of the two updates (Note [Multi-tensor updates] in fused.h): every entry as the single-tensor
  // call above would take it, all on one device, each checked; entries without elements are skipped. The results are
  // bitwise those of one single-tensor call per entry. On a GPU they run on `stream` (Note [Updates on the
  // communication stream] in fused.h); a CPU backend ignores it.
  virtual void sgd_update(const std::vector<SgdParameter>& parameters, UpdateStream stream) = 0;
  virtual void adam_update(const std::vector<AdamParameter>& parameters, UpdateStream stream) = 0;
  // out (one element, contiguous) = (sum |x|^ord)^(1/ord), or max |x| when ord is +infinity; 0 when x is empty.
  // x contiguous, ord > 0.
  virtual void vector_norm(const Tensor& x, double ord, const Tensor& out) = 0;
  // out[i] = x[i] * mask.factor(i) (detail::DropoutMask, its place resolved in the kernel): dropout with the mask
  // drawn where it is applied, never stored (Note [Dropout drawn in place] in ops/dropout_ops.cpp). x and out
  // contiguous float32 of one size; out may be x.
  virtual void apply_dropout(const Tensor& x, const detail::DropoutMask& mask, const Tensor& out) = 0;
  // x *= min(max_norm / (*norm + 1e-6), 1) in float32, with norm a one-element tensor read on the device (NaN
  // propagates). Both contiguous.
  virtual void clip_by_norm(const Tensor& x, const Tensor& norm, float max_norm) = 0;
  // Host transfers of contiguous tensors of any dtype (the bytes as they are); to_host returns once the values are on
  // the host.
  virtual void to_host(const Tensor& src, void* host) = 0;
  virtual void from_host(const void* host, const Tensor& dst) = 0;

  // ---- the general elementwise, reduction and indexing kernels (kernel_ops.h) ----
  // out = f(inputs...) with f = call's functor: every elementwise function of float32 tensors (arithmetic,
  // activations and their gradients, in-place accumulation and scaling). Every input is already expanded to out's
  // shape (any strides, 0 on broadcast dims), as many inputs as arity(call.op); out contiguous. out may be the memory
  // of an input with out's strides (in place: Tensor::add_ and mul_), no other overlap.
  virtual void pointwise(const PointwiseCall& call, const std::vector<Tensor>& inputs, const Tensor& out) = 0;
  // out (contiguous [rows, cols]) = 1 where in_triangle(row, col, diagonal, lower) (kernel_ops.h), else 0: the mask
  // of tril (lower) or triu, made on the device.
  virtual void triangle_mask(int64_t diagonal, bool lower, const Tensor& out) = 0;
  // x contiguous, viewed as [outer, reduce, inner] with reduce >= 1; values contiguous [outer, inner]; indices
  // (Max and Min only, may be undefined) int64, contiguous [outer, inner]: the position along `reduce`.
  virtual void reduce_dim(ReduceOp op, const Tensor& x, int64_t outer, int64_t reduce, int64_t inner,
                          const Tensor& values, const Tensor& indices) = 0;
  // out[p] = x[p with coordinate `dim` replaced by index[p]] for every position p of out's shape. index is int64 of
  // out's shape (any strides), its values in [0, x.size(dim)) (checked by the caller: Note [Index checks] in
  // ops/raw_kernels.h); x any strides, with x.size(d) >= out.size(d) for d != dim; out contiguous.
  virtual void gather(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& out) = 0;
  // target[p with coordinate `dim` replaced by index[p]] += src[p] for every position p of src's shape; src any
  // strides; index int64 of src's shape, its values in [0, target.size(dim)), as for gather; target contiguous, with
  // target.size(d) >= src.size(d) for d != dim. Repeated indices accumulate (in an unspecified order on CUDA).
  virtual void scatter_add(const Tensor& src, int64_t dim, const Tensor& index, const Tensor& target) = 0;

  // ---- convolution and pooling over [N, C, H, W] images (Note [Sliding windows] in sliding_windows.h) ----
  // Note [Convolution as one product] in ops/conv_ops.cpp gives the layout: cols (contiguous float32
  // [C * kH * kW, N * OH * OW]) row (c * kH + kh) * kW + kw, column (n * OH + oh) * OW + ow holds the input at
  // channel c and the position of tap (kh, kw) of output (oh, ow) of image n, 0 where that lies in the padding.
  // input contiguous [N, C, H, W].
  virtual void im2col(const Tensor& input, const Conv2dWindows& windows, const Tensor& cols) = 0;
  // The adjoint of im2col: grad_input (contiguous [N, C, H, W], overwritten) = the sum, over every entry of cols,
  // of that entry at the input position im2col read it from (padding entries dropped).
  virtual void col2im(const Tensor& cols, const Conv2dWindows& windows, const Tensor& grad_input) = 0;
  // out (contiguous [planes, OH, OW]) = the largest input of each window (NaN counts as the largest; of equal ones
  // the first in row-major window order), indices (int64, out's shape) = its position h * W + w in its plane.
  // input contiguous [planes, H, W]; every window holds at least one input position.
  virtual void max_pool2d(const Tensor& input, const Pool2dWindows& windows, const Tensor& out,
                          const Tensor& indices) = 0;
  // grad_input (contiguous [planes, H, W], overwritten) = the sum of grad_out over the outputs whose index is that
  // position.
  virtual void max_pool2d_backward(const Tensor& grad_out, const Tensor& indices, const Pool2dWindows& windows,
                                   const Tensor& grad_input) = 0;
  // out (contiguous [planes, OH, OW]) = each window's sum of inputs / average_divisor (sliding_windows.h).
  virtual void avg_pool2d(const Tensor& input, const Pool2dWindows& windows, const Tensor& out) = 0;
  // grad_input (contiguous, overwritten) = the sum of grad_out / average_divisor over the windows holding each input.
  virtual void avg_pool2d_backward(const Tensor& grad_out, const Pool2dWindows& windows,
                                   const Tensor& grad_input) = 0;
};

Backend& cpu();
Backend& cuda();  // throws Error when tandem was built without CUDA
inline Backend& for_device(const Device& device) { return device.is_cpu() ? cpu() : cuda(); }

// Copies between two contiguous tensors of equal numel on different devices, at least one of them CUDA
// (host <-> GPU, GPU <-> GPU peer copies), ordered after the producers and before later consumers on both sides.
void cuda_copy_across_devices(const Tensor& src, const Tensor& dst);

// Copies a contiguous tensor in page-locked host memory (Storage::is_pinned) into a contiguous CUDA tensor of equal
// numel and dtype on that device's compute stream, without waiting for it (Note [Copies from pinned memory] in
// cuda/cross_device_copy.cpp).
void cuda_copy_from_pinned(const Tensor& src, const Tensor& dst);

// Fills `out` (contiguous float32 on a CUDA device) with U[low, high) values of the calling thread's generator stream
// on the device, computed there (Note [Random draws in captured graphs] in tandem/core/random.h): eagerly the values
// the host would draw, reserved now; inside a DeviceGraph's capture, recorded for its replays. Errors name `caller`.
void cuda_fill_uniform(const Tensor& out, float low, float high, const char* caller);
// Reserves `count` values of the calling thread's generator stream for a kernel on `device` to draw in place: the
// next `count` values (on a CPU device, or a GPU outside any capture), or, while a DeviceGraph captures the GPU's
// compute stream, a place recorded for its replays (cuda_reserve_draws). Errors name `caller`.
detail::DrawPlace reserve_draws(Device device, uint64_t count, const char* caller);
detail::DrawPlace cuda_reserve_draws(int device, uint64_t count, const char* caller);
// Whether CUDA device `device`'s compute stream is being captured into a CUDA graph.
bool cuda_stream_capturing(int device);

// Note [Index checks on the device]: while a DeviceGraph captures a GPU's stream, index checks cannot read the
// indices back (ops/raw_kernels.h's Note [Index checks]). They enqueue a kernel instead that checks every value of
// `index` (int64, any strides, on that GPU) against [0, limit), values equal to ignore_index allowed, and records
// the first bad one it finds in the device's fault record (page-locked host memory mapped into the device); the
// kernels that read indices skip a value out of range (gather gives NaN, scatter_add adds nothing), so nothing reads
// or writes outside its tensors meanwhile. The fault is raised as an Error by cuda_raise_index_fault: at the next copy
// of a tensor of that device to the host (which waits for the device, so for the checking kernel), before the next
// replay and before the next capture of a DeviceGraph on that device. The message names `caller` (a string literal),
// the value, its position in index's row-major order and the limit, as the host check's does.
void cuda_check_indices_on_device(const char* caller, const Tensor& index, int64_t limit, int64_t dim,
                                  std::optional<int64_t> ignore_index);
// Throws the fault that a check on `device` recorded, if any, and clears it; the first call on a device allocates
// its record (so call it before a capture, which cannot allocate page-locked memory).
void cuda_raise_index_fault(int device);

// An event from `device`'s pool, recorded on its compute stream; it returns to the pool when the last reference is
// dropped (Note [Stream markers]).
std::shared_ptr<const detail::MarkerEvent> cuda_record_marker(int device);
// Whether the work before a marker's event has finished (cudaEventQuery; the host does not wait); and a host wait for
// it (cudaEventSynchronize).
bool cuda_marker_done(const detail::MarkerEvent& marker);
void cuda_marker_synchronize(const detail::MarkerEvent& marker);

// Creates the per-device state that the first operations on each of `devices` (CUDA device indices) would create
// lazily, and peer access between every two of them (warm_up.h).
void cuda_warm_up(const std::vector<int>& devices);

}  // namespace tandem::backend
