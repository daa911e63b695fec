#pragma once
// Differentiable tensor operations. Every op checks that its inputs are defined, live on one device and have
// compatible shapes, and throws tandem::Error naming the op otherwise. Elementwise ops broadcast like NumPy.

#include <optional>
#include <string_view>
#include <tuple>
#include <vector>

#include "tandem/core/precision.h"
#include "tandem/core/tensor.h"

namespace tandem {

Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, float s);
Tensor operator*(float s, const Tensor& a);
Tensor operator/(const Tensor& a, float s);
Tensor operator-(const Tensor& a);
// torch.matmul's rules: 1-D . 1-D (a 0-D result); 2-D @ 2-D; a 1-D operand as a one-row (left) or one-column
// (right) matrix whose unit dim the result drops; N-D @ 1-D or 2-D as one product over all of a's rows; otherwise
// batched over the broadcast batch dims (all but the last two), one strided-batched product that reads broadcast and
// transposed operands in place (a copy only where the batch dims do not merge into one stride). In
// default_precision(), fixed when recorded. Errors: a 0-D operand; inner sizes that differ; batch dims that do not
// broadcast.
Tensor matmul(const Tensor& a, const Tensor& b);
// a [B, n, k] @ b [B, k, m] -> [B, n, m], as torch.bmm (no broadcasting). Errors: not 3-D; batch or inner sizes
// that differ.
Tensor bmm(const Tensor& a, const Tensor& b);
// x W^T + b with x: [n, in], W: [out, in], b: [out] (or undefined); one fused op (one GEMM, bias in its epilogue).
// The product runs in `precision` (Note [Precision modes] in precision.h), or default_precision() when none is
// given; x, W, b, the result and every gradient are float32 in every precision.
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias,
              std::optional<Precision> precision = std::nullopt);
// relu(linear(x, weight, bias, precision)) as one op: the ReLU in the product's epilogue, the same values.
Tensor linear_relu(const Tensor& x, const Tensor& weight, const Tensor& bias,
                   std::optional<Precision> precision = std::nullopt);
Tensor relu(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor sum(const Tensor& x);                            // all elements -> shape {}
Tensor sum(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor mean(const Tensor& x);
Tensor cat(const std::vector<Tensor>& tensors, int64_t dim = 0);
// mean((input - target)^2) as one fused op; shapes must match exactly.
Tensor mse_loss(const Tensor& input, const Tensor& target);

// ---- elementwise math (float32; CPU and CUDA; differentiable) -------------------------------------------------
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor rsqrt(const Tensor& x);                 // 1 / sqrt(x)
Tensor pow(const Tensor& x, float exponent);
Tensor pow(const Tensor& base, const Tensor& exponent);  // broadcasting
Tensor abs(const Tensor& x);                   // gradient sign(x), 0 at 0
Tensor neg(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor sin(const Tensor& x);  // radians
Tensor cos(const Tensor& x);
// torch.nn.functional.gelu: approximate "none" (x * Phi(x), with erf) or "tanh". Errors: any other approximate.
Tensor gelu(const Tensor& x, std::string_view approximate = "none");
// min(max(x, min), max), NaN kept; max wins where min > max. Gradient 1 where min <= x <= max, else 0.
Tensor clamp(const Tensor& x, float min, float max);
Tensor clamp_min(const Tensor& x, float min);
Tensor clamp_max(const Tensor& x, float max);

// ---- arithmetic with broadcasting and with scalars --------------------------------------------------------------
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator+(const Tensor& a, float s);
Tensor operator+(float s, const Tensor& a);
Tensor operator-(const Tensor& a, float s);
Tensor operator-(float s, const Tensor& a);
Tensor operator/(float s, const Tensor& a);

// ---- comparisons and selection ----------------------------------------------------------------------------------
// Elementwise, broadcasting; float32 masks of 1 and 0 that carry no gradient. NaN compares unequal to everything.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, float b);
Tensor ne(const Tensor& a, float b);
Tensor lt(const Tensor& a, float b);
Tensor le(const Tensor& a, float b);
Tensor gt(const Tensor& a, float b);
Tensor ge(const Tensor& a, float b);
Tensor operator<(const Tensor& a, const Tensor& b);
Tensor operator<=(const Tensor& a, const Tensor& b);
Tensor operator>(const Tensor& a, const Tensor& b);
Tensor operator>=(const Tensor& a, const Tensor& b);
Tensor operator<(const Tensor& a, float b);
Tensor operator<=(const Tensor& a, float b);
Tensor operator>(const Tensor& a, float b);
Tensor operator>=(const Tensor& a, float b);
// condition != 0 ? a : b elementwise, the three broadcast together; differentiable in a and b (not in condition).
Tensor where(const Tensor& condition, const Tensor& a, const Tensor& b);
// x with `value` where mask is non-zero (torch.masked_fill; tandem has no bool dtype, so the mask is a float32 0/1
// mask, as the comparisons return, or an int64 one). The mask broadcasts to x's shape, which the result has; it is
// converted on its device (no host round trip). Differentiable in x: the gradient is 0 where filled. Errors: a mask
// of another dtype, or one that does not broadcast to x's shape.
Tensor masked_fill(const Tensor& x, const Tensor& mask, float value);
// The lower (tril) or upper (triu) triangle of each matrix in x's last two dims, the rest 0, as torch.tril / triu:
// element (i, j) is kept where j - i <= diagonal (tril) or j - i >= diagonal (triu); diagonal 0 is the main diagonal,
// positive ones lie above it. Any leading (batch) dims; the mask is made on x's device. Differentiable: the gradient
// is masked the same way. Errors: fewer than 2 dims.
Tensor tril(const Tensor& x, int64_t diagonal = 0);
Tensor triu(const Tensor& x, int64_t diagonal = 0);

// ---- reductions over dimensions -----------------------------------------------------------------------------------
// `dims` may be negative and come in any order; an empty list means every dimension. keepdim keeps them as size 1.
// Errors: a dimension out of range or repeated.
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);  // NaN over no elements
// Variance, dividing by max(N - correction, 0) for N elements per result: correction 1 (or true, PyTorch's unbiased)
// is Bessel's, 0 (or false) the population variance.
Tensor var(const Tensor& x, const std::vector<int64_t>& dims, double correction = 1.0, bool keepdim = false);
Tensor var(const Tensor& x);  // every element, unbiased
// log(sum(exp(x))) computed as m + log(sum(exp(x - m))) with m the maximum, so that large inputs do not overflow.
Tensor logsumexp(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim = false);
// Largest (smallest) value along `dim` and the index of its first occurrence (int64). NaN counts as the largest and
// the smallest. The gradient goes to that index, as torch.max(x, dim) does.
// Errors: an empty dimension.
std::tuple<Tensor, Tensor> max(const Tensor& x, int64_t dim, bool keepdim = false);
std::tuple<Tensor, Tensor> min(const Tensor& x, int64_t dim, bool keepdim = false);
// Over every element: the gradient is shared evenly by the elements equal to the result (as torch.max(x)).
Tensor max(const Tensor& x);
Tensor min(const Tensor& x);
// The int64 indices alone (no gradient); without `dim`, the index into the flattened tensor, shape [].
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmin(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x);
Tensor argmin(const Tensor& x);

// ---- softmax ------------------------------------------------------------------------------------------------------
// Along `dim`, as exp(x - logsumexp(x)) and x - logsumexp(x): stable for large inputs. Closed-form gradients.
Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

// ---- layer normalization --------------------------------------------------------------------------------------------
// torch.nn.functional.layer_norm: each [normalized_shape] block of the trailing dims of `input` becomes
// (x - mean) / sqrt(var + eps) * weight + bias, with the biased variance; weight and bias of normalized_shape, either
// undefined for none. One fused kernel for the forward and two for the backward on CUDA (Note [Fused layer norm] in
// core/src/cuda/layer_norm.h); the CPU computes the statistics in double. Float32 tensors (autocast keeps
// normalization in float32, as PyTorch's does); differentiable in input, weight and bias.
// Errors: an undefined input; a dtype other than float32; an empty or non-positive normalized_shape, or one that is
// not input's trailing shape; weight or bias of another shape or device; eps negative or not finite.
Tensor layer_norm(const Tensor& input, const Shape& normalized_shape, const Tensor& weight = {},
                  const Tensor& bias = {}, double eps = 1e-5);

// ---- fused attention ------------------------------------------------------------------------------------------------
// softmax(scale * q k^T) v for q [..., L, E], k and v [..., S, E] with equal batch dims (not broadcast), in one
// forward and one backward pass that never store the [..., L, S] scores (FlashAttention-2's tiling, online softmax
// and recomputation: Note [Fused attention] in core/src/cuda/attention.h). With is_causal, key j is left out for query
// i when j > i (aligned at the top left, as PyTorch's is_causal); a row without keys (S == 0) is NaN. Returns
// [..., L, E] of q's dtype. q, k and v are float32 or bfloat16 (one dtype); any strides (views with stride 1 in the
// last dim, as x.reshape({B, T, H, E}).transpose(1, 2), are read in place, others copied). The products run in
// `precision` (default_precision() when none is given, fixed when the op is recorded): BFloat16 multiplies bfloat16
// operands with float32 sums on CUDA's tensor cores (float32 inputs rounded first, the result and gradients in the
// inputs' dtype); Float32 and TF32 multiply in float32 (TF32 is not used: the scores' softmax needs float32 inputs).
// The CPU computes the same definition in double. Differentiable in q, k and v; the forward keeps each row's
// logsumexp for the backward. With dropout_p > 0, the probabilities are dropped and scaled as nn::dropout would drop
// the [..., L, S] weights (the same values of the calling thread's generator stream, so the same mask), the mask
// drawn in place by the kernels in the forward and again in the backward, never stored; captured CUDA graphs draw a
// new one at each replay. nn::scaled_dot_product_attention calls it where it applies.
// Errors: undefined or fewer than 2-D inputs; dtypes other than float32 and bfloat16, or that differ; different
// devices; batch dims that differ; S of k and v that differ; head dims that differ or are not 32, 64 or 128; a scale
// that is not finite; dropout_p outside [0, 1).
Tensor fused_attention(const Tensor& q, const Tensor& k, const Tensor& v, double scale, bool is_causal = false,
                       std::optional<Precision> precision = std::nullopt, double dropout_p = 0.0);

// ---- dropout -------------------------------------------------------------------------------------------------------
// input * mask / (1 - p) with the mask nn::dropout draws (an element kept when its value of Tensor::rand(input's
// shape) is >= p, the same values of the calling thread's generator stream), drawn by the kernel that applies it and
// again by the backward's, never stored (Note [Dropout drawn in place] in core/src/ops/dropout_ops.cpp); a captured
// CUDA graph draws a new mask at each replay. Differentiable in input. nn::dropout calls it.
// Errors: an undefined or non-float32 input; p outside [0, 1).
Tensor dropout_drawn_in_place(const Tensor& input, double p);

// ---- indexing -----------------------------------------------------------------------------------------------------
// Indices are int64 tensors on x's device, as in PyTorch. Each is checked on the host (one copy from the device, which
// waits for the device's queued work): Error when it is not int64 (a float32 index too: convert it with
// .to(DType::Int64)) or when a value is negative or out of range, naming the value and its position. While a
// DeviceGraph captures x's GPU (is_capturing), the values are checked on the device instead, and a bad one is an
// Error at the next copy to the host, replay or capture on that GPU (check_indices_on_device); meanwhile the kernels
// skip it (gather reads NaN, scatter_add adds nothing).
//
// Enqueues a check on index's GPU of every value of the int64 tensor `index` against [0, limit), values equal to
// `allowed` (when given) let through, without the host waiting: a bad value is raised as an Error naming `caller`,
// the value and its position at the next copy of a tensor of that GPU to the host, before the next replay and
// before the next capture of a DeviceGraph there (Note [Index checks on the device] in core/src/backend.h). For
// checks inside captured work; the index ops do it themselves. Errors (now): index not int64, or not on a GPU.
void check_indices_on_device(const Tensor& index, int64_t limit, std::optional<int64_t> allowed, const char* caller);
// x's slices at `index` (0-D or 1-D) along dim; differentiable in x (repeated indices add up).
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);
// out[i][j][k] = x[i][index[i][j][k]][k] for dim 1 (torch.gather): index has x's number of dimensions and at most
// x's size in every other dimension; out has index's shape. Differentiable in x.
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);
// torch.scatter_add: a copy of x with out[i][index[i][j][k]][k] += src[i][j][k] for dim 1 and every position of
// index's shape. index has x's number of dimensions, at most x's size in every other dimension and at most src's size
// in every dimension (src's other elements are not read). Differentiable in x (the gradient passes through) and in
// src (the gradient gathered at index, 0 for the elements not read). Repeated indices add up; on CUDA in an
// unspecified order (atomic adds), so the last bits of such sums may vary between runs.
Tensor scatter_add(const Tensor& x, int64_t dim, const Tensor& index, const Tensor& src);
// int64, indices' shape plus [num_classes]: 1 where the class is the index, else 0 (torch.nn.functional.one_hot).
// num_classes -1: the largest index + 1. Convert with .to(DType::Float32) to compute with it.
Tensor one_hot(const Tensor& indices, int64_t num_classes = -1);
// Joins tensors of one shape along a new dimension `dim` (in [-(ndim + 1), ndim]); differentiable.
Tensor stack(const std::vector<Tensor>& tensors, int64_t dim = 0);

// ---- sampling -----------------------------------------------------------------------------------------------------
// int64 category indices drawn from each row of probs (1-D [C] -> [num_samples]; 2-D [N, C] -> [N, num_samples]),
// category c with probability proportional to its weight (non-negative, finite, not necessarily normalized), as
// torch.multinomial; without replacement every index of a row is distinct. Computed on the host: probs is copied to
// the host (on a GPU this waits for the work queued before it), the indices are drawn with the calling thread's
// generator stream (Note [Generator streams] in random.h; one uniform per sample, so the same seed gives the same
// indices on every device) and copied to probs' device. No gradient. Errors: not 1-D or 2-D; num_samples < 1; a
// negative, infinite or NaN weight; a row without a positive weight; without replacement, more samples than a row
// has positive weights.
Tensor multinomial(const Tensor& probs, int64_t num_samples, bool replacement = false);

// Compares values on any devices (copies to the host): |a - b| <= atol + rtol * |b| elementwise, shapes equal.
bool allclose(const Tensor& a, const Tensor& b, double rtol = 1e-5, double atol = 1e-8);
// Largest |a - b| over all elements (shapes must match), on any devices.
double max_abs_diff(const Tensor& a, const Tensor& b);

}  // namespace tandem
