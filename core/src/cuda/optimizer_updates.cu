// The CUDA backend's fused optimizer updates: torch.optim.SGD's and Adam's / AdamW's rules per element, rounded as
// the CPU backend rounds them (Note [Rounding like the CPU] in kernel_ops.h), four elements at a time where the
// arrays allow it, over one tensor or a list of tensors per launch. See optimizer_updates.h for the contracts.

#include "cuda/optimizer_updates.h"

#include <algorithm>
#include <type_traits>

#include "cuda/launch.cuh"

namespace tandem::cuda::kernels {
namespace {

// Note [Updates four elements at a time]: an optimizer update is bound by memory (SGD with momentum moves 20 bytes
// per element), and 4-byte loads and stores reach a good deal less of the memory's bandwidth than the elementwise
// kernels' 16-byte ones (docs/benchmarks.md, "Design measurements"). So where every array of a tensor's update starts
// on a 16-byte boundary, a thread takes groups of four elements (one float4 load or store per array), then the last
// n % 4 elements one at a time; otherwise one at a time throughout. The rule runs per element either way, so the
// results are bitwise the same. The bodies capture by value: a reference into the kernel's parameters (a multi-tensor
// kernel's entries) held by a closure made every thread copy them all to local memory first (a 3.5 KiB stack frame,
// many times slower).
template <int kWidth>
struct Lanes {
  float v[kWidth];
};

template <int kWidth>
__device__ Lanes<kWidth> load_lanes(const float* p, int64_t i) {
  if constexpr (kWidth == 4) {
    const float4 f = *reinterpret_cast<const float4*>(p + i);
    return {{f.x, f.y, f.z, f.w}};
  } else {
    return {{p[i]}};
  }
}

template <int kWidth>
__device__ void store_lanes(float* p, int64_t i, const Lanes<kWidth>& lanes) {
  if constexpr (kWidth == 4) {
    *reinterpret_cast<float4*>(p + i) = make_float4(lanes.v[0], lanes.v[1], lanes.v[2], lanes.v[3]);
  } else {
    p[i] = lanes.v[0];
  }
}

// Calls body(i, width) for this thread's share of [0, n): groups of four (width an integral_constant of 4) when
// `by_four`, and single elements (width 1) for what is left.
template <typename Body>
__device__ void for_each_group(int64_t n, bool by_four, Body body) {
  int64_t single = 0;
  if (by_four) {
    const int64_t groups = n / 4;
    for (int64_t g = global_thread(); g < groups; g += grid_threads()) body(g * 4, std::integral_constant<int, 4>{});
    single = groups * 4;
  }
  for (int64_t i = single + global_thread(); i < n; i += grid_threads()) body(i, std::integral_constant<int, 1>{});
}

// The SGD rule for one element: returns the new parameter and updates `momentum` (read only after the first step).
// See Note [Rounding like the CPU] in kernel_ops.h.
__device__ float sgd_rule(float param, float d, float& momentum, const SgdUpdate& u, float lr) {
  if (u.weight_decay != 0.0f) d = __fadd_rn(d, __fmul_rn(u.weight_decay, param));
  if (u.momentum != 0.0f) {
    momentum = u.first_step ? d : __fadd_rn(__fmul_rn(u.momentum, momentum), __fmul_rn(1.0f - u.dampening, d));
    d = u.nesterov ? __fadd_rn(d, __fmul_rn(u.momentum, momentum)) : momentum;
  }
  return __fsub_rn(param, __fmul_rn(lr, d));
}

// The SGD rule for the elements of one tensor that this thread covers; lr_on_device, when not null, replaces u.lr
// (Note [Hyper-parameters in device memory] in fused.h). The single-tensor and the multi-tensor kernels both run it,
// so their results are bitwise equal (Note [Multi-tensor updates] in fused.h).
__device__ void sgd_elements(int64_t n, float* param, const float* grad, float* momentum_buffer, const SgdUpdate& u,
                             const float* lr_on_device) {
  const float lr = lr_on_device != nullptr ? *lr_on_device : u.lr;
  const bool momentum = u.momentum != 0.0f;
  const bool by_four = aligned16(param) && aligned16(grad) && (!momentum || aligned16(momentum_buffer));
  for_each_group(n, by_four, [=](int64_t i, auto width) {
    constexpr int kWidth = decltype(width)::value;
    Lanes<kWidth> p = load_lanes<kWidth>(param, i);
    const Lanes<kWidth> g = load_lanes<kWidth>(grad, i);
    Lanes<kWidth> buffer{};
    if (momentum && !u.first_step) buffer = load_lanes<kWidth>(momentum_buffer, i);
#pragma unroll
    for (int lane = 0; lane < kWidth; ++lane) p.v[lane] = sgd_rule(p.v[lane], g.v[lane], buffer.v[lane], u, lr);
    if (momentum) store_lanes(momentum_buffer, i, buffer);
    store_lanes(param, i, p);
  });
}

__device__ void sgd_kernel(int64_t n, float* param, const float* grad, float* momentum_buffer, SgdUpdate u,
                           const float* lr_on_device) {
  sgd_elements(n, param, grad, momentum_buffer, u, lr_on_device);
}

// The Adam rule for one element: returns the new parameter and updates the moments (max_exp_avg_sq only with
// `amsgrad`). See Note [Rounding like the CPU] in kernel_ops.h; the operations and their order are those of fused.h's
// AdamUpdate. small_weight picks torch.lerp's form.
__device__ float adam_rule(float param, float d, float& exp_avg, float& exp_avg_sq, float& max_exp_avg_sq,
                           bool amsgrad, bool small_weight, const AdamUpdate& u) {
  const float scaled = __fmul_rn(param, u.param_scale);
  if (u.weight_decay != 0.0f) d = __fadd_rn(d, __fmul_rn(u.weight_decay, scaled));
  const float m = exp_avg;
  exp_avg = small_weight ? __fadd_rn(m, __fmul_rn(u.one_minus_beta1, __fsub_rn(d, m)))
                         : __fsub_rn(d, __fmul_rn(__fsub_rn(d, m), __fsub_rn(1.0f, u.one_minus_beta1)));
  float second = __fadd_rn(__fmul_rn(exp_avg_sq, u.beta2), __fmul_rn(__fmul_rn(u.one_minus_beta2, d), d));
  exp_avg_sq = second;
  if (amsgrad) {
    if (!(second > max_exp_avg_sq || isnan(second))) second = max_exp_avg_sq;  // NaN in either stays NaN
    max_exp_avg_sq = second;
  }
  const float denom = __fadd_rn(__fdiv_rn(__fsqrt_rn(second), u.bias_correction2_sqrt), u.eps);
  return __fadd_rn(scaled, __fdiv_rn(__fmul_rn(-u.step_size, exp_avg), denom));
}

// The Adam rule for the elements of one tensor that this thread covers. step_factors, when not null, replaces
// u.param_scale, u.step_size and u.bias_correction2_sqrt (Note [Hyper-parameters in device memory] in fused.h).
// Shared by the single- and the multi-tensor kernels, as sgd_elements is.
__device__ void adam_elements(int64_t n, float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                              float* max_exp_avg_sq, AdamUpdate u, const float* step_factors) {
  if (step_factors != nullptr) {
    u.param_scale = step_factors[0];
    u.step_size = step_factors[1];
    u.bias_correction2_sqrt = step_factors[2];
  }
  const bool small_weight = fabsf(u.one_minus_beta1) < 0.5f;  // torch.lerp's choice of form
  const bool amsgrad = max_exp_avg_sq != nullptr;
  const bool by_four = aligned16(param) && aligned16(grad) && aligned16(exp_avg) && aligned16(exp_avg_sq) &&
                       aligned16(max_exp_avg_sq);
  for_each_group(n, by_four, [=](int64_t i, auto width) {
    constexpr int kWidth = decltype(width)::value;
    Lanes<kWidth> p = load_lanes<kWidth>(param, i);
    const Lanes<kWidth> g = load_lanes<kWidth>(grad, i);
    Lanes<kWidth> m = load_lanes<kWidth>(exp_avg, i);
    Lanes<kWidth> v = load_lanes<kWidth>(exp_avg_sq, i);
    Lanes<kWidth> v_max{};
    if (amsgrad) v_max = load_lanes<kWidth>(max_exp_avg_sq, i);
#pragma unroll
    for (int lane = 0; lane < kWidth; ++lane)
      p.v[lane] = adam_rule(p.v[lane], g.v[lane], m.v[lane], v.v[lane], v_max.v[lane], amsgrad, small_weight, u);
    store_lanes(exp_avg, i, m);
    store_lanes(exp_avg_sq, i, v);
    if (amsgrad) store_lanes(max_exp_avg_sq, i, v_max);
    store_lanes(param, i, p);
  });
}

__device__ void adam_kernel(int64_t n, float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
                            float* max_exp_avg_sq, AdamUpdate u, const float* step_factors) {
  adam_elements(n, param, grad, exp_avg, exp_avg_sq, max_exp_avg_sq, u, step_factors);
}

// Note [Multi-tensor kernel arguments]: a multi-tensor kernel takes its entries by value, in one kernel argument of
// at most kArgumentBytes (under CUDA's 4 KiB limit on a launch's arguments), so a captured graph keeps them in the
// node and a replay reads nothing from the host. Entry y is updated by the blocks of row y of the grid, with the
// grid-stride loop of the single-tensor kernel along x, so the entries are updated side by side (one after another
// in each thread, a small model's update would wait for one round trip to memory per tensor); a longer list is
// launched in several blocks of entries.
constexpr size_t kArgumentBytes = 3584;

template <typename Entry>
struct EntryBlock {
  static constexpr int kCapacity = static_cast<int>((kArgumentBytes - sizeof(int)) / sizeof(Entry));
  Entry entries[kCapacity];
  int count;
};
static_assert(sizeof(EntryBlock<SgdEntry>) <= 4096 && EntryBlock<SgdEntry>::kCapacity >= 16);
static_assert(sizeof(EntryBlock<AdamEntry>) <= 4096 && EntryBlock<AdamEntry>::kCapacity >= 16);

__device__ void multi_sgd_kernel(EntryBlock<SgdEntry> block) {
  const SgdEntry& e = block.entries[blockIdx.y];
  sgd_elements(e.n, e.param, e.grad, e.momentum_buffer, e.update, e.lr);
}

__device__ void multi_adam_kernel(EntryBlock<AdamEntry> block) {
  const AdamEntry& e = block.entries[blockIdx.y];
  adam_elements(e.n, e.param, e.grad, e.exp_avg, e.exp_avg_sq, e.max_exp_avg_sq, e.update, e.step_factors);
}

// Launches `kernel` over the entries with elements, kCapacity entries per launch, each launch's grid a row of blocks
// per entry (Note [Multi-tensor kernel arguments]), the rows as long as its largest entry needs.
template <auto kKernel, typename Entry>
void launch_blocks(const std::vector<Entry>& entries, cudaStream_t stream) {
  EntryBlock<Entry> block{};
  int64_t largest = 0;
  const auto flush = [&] {
    if (block.count == 0) return;
    launch<kKernel>(dim3(static_cast<unsigned>(blocks_for(largest)), static_cast<unsigned>(block.count)), kThreads,
                    stream, block);
    block.count = 0;
    largest = 0;
  };
  for (const Entry& entry : entries) {
    if (entry.n == 0) continue;
    block.entries[block.count++] = entry;
    largest = std::max(largest, entry.n);
    if (block.count == EntryBlock<Entry>::kCapacity) flush();
  }
  flush();
}

}  // namespace

void sgd_update(float* param, const float* grad, float* momentum_buffer, int64_t n, const SgdUpdate& update,
                const float* lr_on_device, cudaStream_t stream) {
  if (n == 0) return;
  launch<sgd_kernel>(blocks_for(n), kThreads, stream, n, param, grad, momentum_buffer, update, lr_on_device);
}

void adam_update(float* param, const float* grad, float* exp_avg, float* exp_avg_sq, float* max_exp_avg_sq, int64_t n,
                 const AdamUpdate& update, const float* step_factors, cudaStream_t stream) {
  if (n == 0) return;
  launch<adam_kernel>(blocks_for(n), kThreads, stream, n, param, grad, exp_avg, exp_avg_sq,
                      update.amsgrad ? max_exp_avg_sq : nullptr, update, step_factors);
}

void sgd_update(const std::vector<SgdEntry>& entries, cudaStream_t stream) {
  launch_blocks<multi_sgd_kernel>(entries, stream);
}

void adam_update(const std::vector<AdamEntry>& entries, cudaStream_t stream) {
  launch_blocks<multi_adam_kernel>(entries, stream);
}

}  // namespace tandem::cuda::kernels
