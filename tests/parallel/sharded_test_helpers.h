#pragma once
// ZeRO stages 1 and 2 (DistributedOptions::zero_stage = 1 or 2 with a parallel::ShardedOptimizer) against stage 0
// with a plain optimizer over the master's parameters, both trained PyTorch-style through the module form, shared by
// the in-process tests (tests/parallel) and the multi-process ones (tests/distributed).

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "parallel/distributed_test_helpers.h"
#include "tandem/nn/clip_grad.h"
#include "tandem/optim/adam.h"
#include "tandem/optim/sgd.h"
#include "tandem/parallel/sharded_optimizer.h"
#include "tandem/parallel/training_step.h"

namespace tandem::testing {

enum class UpdateRule { SgdMomentum, Adam, AdamW };

inline std::string rule_name(UpdateRule rule) {
  switch (rule) {
    case UpdateRule::SgdMomentum:
      return "SGD with momentum";
    case UpdateRule::Adam:
      return "Adam";
    case UpdateRule::AdamW:
      return "AdamW";
  }
  return "?";
}

constexpr optim::SGDOptions kShardedSgd{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3};
constexpr optim::AdamOptions kShardedAdam{.lr = 1e-2, .weight_decay = 1e-3};
constexpr optim::AdamWOptions kShardedAdamW{.lr = 1e-2, .weight_decay = 0.1};
constexpr size_t kShardedSteps = 50;
constexpr int kShardedStages[] = {1, 2};

// This process's rows of step `step` (12: every device of a process of up to 4 devices gets some).
inline DistributedBatch process_batch(size_t step, int rank) {
  const auto seed = 31 * static_cast<uint64_t>(rank) + step;
  return {seeded_randn({12, 10}, Device::cpu(0), 900 + seed), seeded_randn({12, 1}, Device::cpu(0), 1300 + seed)};
}

struct ShardedRun {
  std::shared_ptr<TwoLayerNet> net;                // the master after training
  std::vector<std::vector<Tensor>> replicas;       // [replica][parameter], copies taken after training
  std::vector<size_t> state_bytes;                 // per local device (stage 0: the master's optimizer's)
  int64_t padded_numel = 0;                        // elements of one flat gradient buffer, padding included
  std::vector<int64_t> gradient_numel;             // per local device: the elements of its gradient buffer (or shard)
  std::vector<float> norms;                        // each step's total gradient norm, with clipping
  std::vector<float> losses;                       // each step's loss (this process's part), TrainingStep runs only
  std::vector<parallel::StepStrategy> strategies;  // each step's, TrainingStep runs only
  std::string fallback_reason;                     // the last TrainingStep's
};

// `clip` runs between backward and step (a no-op without clipping).
template <typename Optimizer, typename Clip = void (*)()>
void train_module_form(
    parallel::DistributedDataParallel& ddp, Optimizer& optimizer, size_t steps, const Clip& clip = [] {}) {
  for (size_t step = 0; step < steps; ++step) {
    optimizer.zero_grad();
    const DistributedBatch batch = process_batch(step, ddp.group()->rank());
    const Device first = ddp.group()->devices()[0];
    const Tensor out = ddp(batch.x.to(first));
    nn::mse_loss(out, batch.y.to(first)).backward();
    clip();
    optimizer.step();
  }
}

// `steps` steps of `rule` over `group` (bucket_size 128: three buckets of 21, 20 and 200 elements before padding, so
// parameters straddle the devices' chunks); max_norm > 0: the gradients clipped to it before each step, stage 0 by
// nn::utils::clip_grad_norm_ over the parameters, stages 1 and 2 by ShardedOptimizer::clip_grad_norm.
inline ShardedRun train_sharded(const std::shared_ptr<comm::ProcessGroup>& group, int zero_stage, UpdateRule rule,
                                size_t steps = kShardedSteps, double max_norm = 0.0) {
  ShardedRun run;
  run.net = distributed_net(group->devices()[0]);
  parallel::DistributedDataParallel ddp(run.net, group, {.bucket_size = 128, .zero_stage = zero_stage});
  if (zero_stage == 0) {
    std::unique_ptr<optim::Optimizer> plain;
    if (rule == UpdateRule::SgdMomentum) plain = std::make_unique<optim::SGD>(ddp.parameters(), kShardedSgd);
    if (rule == UpdateRule::Adam) plain = std::make_unique<optim::Adam>(ddp.parameters(), kShardedAdam);
    if (rule == UpdateRule::AdamW) plain = std::make_unique<optim::AdamW>(ddp.parameters(), kShardedAdamW);
    train_module_form(ddp, *plain, steps, [&] {
      if (max_norm > 0.0) run.norms.push_back(nn::utils::clip_grad_norm_(ddp.parameters(), max_norm).item());
    });
    run.state_bytes.push_back(parallel::optimizer_state_bytes(*plain));
  } else {
    std::unique_ptr<parallel::ShardedOptimizer> sharded;
    if (rule == UpdateRule::SgdMomentum) sharded = std::make_unique<parallel::ShardedSGD>(ddp, kShardedSgd);
    if (rule == UpdateRule::Adam) sharded = std::make_unique<parallel::ShardedAdam>(ddp, kShardedAdam);
    if (rule == UpdateRule::AdamW) sharded = std::make_unique<parallel::ShardedAdamW>(ddp, kShardedAdamW);
    train_module_form(ddp, *sharded, steps, [&] {
      if (max_norm > 0.0) run.norms.push_back(sharded->clip_grad_norm(max_norm).item());
    });
    for (size_t d = 0; d < sharded->size(); ++d) run.state_bytes.push_back(sharded->optimizer_state_bytes(d));
  }
  for (const std::shared_ptr<nn::Module>& replica : ddp.replicated().replicas()) {
    run.replicas.emplace_back();
    for (const Tensor& parameter : replica->parameters()) run.replicas.back().push_back(parameter.detach().clone());
  }
  run.padded_numel = ddp.replicated().gradient_layout().numel();
  for (size_t d = 0; d < ddp.replicated().size(); ++d) {
    run.gradient_numel.push_back(ddp.replicated().gradient_buffer(d).numel());
  }
  return run;
}

// `steps` AdamW steps of parallel::TrainingStep over `group`'s model summing its gradients, clipped to max_norm:
// stage 0 with parallel::ReplicatedAdamW, stages 1 and 2 with parallel::ShardedAdamW (Note [Training steps over
// shards]); captured on CUDA devices after the warm-up unless `capture` is false.
inline ShardedRun train_steps_sharded(const std::shared_ptr<comm::ProcessGroup>& group, int zero_stage,
                                      size_t steps = kShardedSteps, double max_norm = 0.5, bool capture = true) {
  ShardedRun run;
  run.net = distributed_net(group->devices()[0]);
  parallel::DistributedDataParallel ddp(
      run.net, group, {.bucket_size = 128, .reduction = comm::ReduceOp::Sum, .zero_stage = zero_stage});
  std::unique_ptr<parallel::ReplicatedAdamW> replicated;
  std::unique_ptr<parallel::ShardedAdamW> sharded;
  std::unique_ptr<parallel::TrainingStep> step;
  const parallel::TrainingStepOptions options{.capture = capture, .max_grad_norm = max_norm};
  if (zero_stage == 0) {
    replicated = std::make_unique<parallel::ReplicatedAdamW>(ddp.replicated(), kShardedAdamW);
    step = std::make_unique<parallel::TrainingStep>(ddp, *replicated, nn::mse_loss, options);
  } else {
    sharded = std::make_unique<parallel::ShardedAdamW>(ddp, kShardedAdamW);
    step = std::make_unique<parallel::TrainingStep>(ddp, *sharded, nn::mse_loss, options);
  }
  for (size_t s = 0; s < steps; ++s) {
    const DistributedBatch batch = process_batch(s, group->rank());
    const Tensor loss =
        step->step({.features = batch.x, .targets = batch.y, .global_rows = batch.x.size(0) * group->size()});
    run.losses.push_back(loss.item());
    run.strategies.push_back(step->strategy());
  }
  run.fallback_reason = step->fallback_reason();
  for (const std::shared_ptr<nn::Module>& replica : ddp.replicated().replicas()) {
    run.replicas.emplace_back();
    for (const Tensor& parameter : replica->parameters()) run.replicas.back().push_back(parameter.detach().clone());
  }
  return run;
}

// Two TrainingStep runs: the same losses and parameters within 1e-6 relative.
inline void expect_step_runs_equal(const ShardedRun& stage0, const ShardedRun& stage1, double atol = 1e-7) {
  ASSERT_EQ(stage1.losses.size(), stage0.losses.size());
  for (size_t s = 0; s < stage0.losses.size(); ++s) {
    EXPECT_NEAR(stage1.losses[s], stage0.losses[s], 1e-6 * std::abs(stage0.losses[s])) << "step " << s;
  }
  expect_parameters_close(*stage1.net, *stage0.net, 1e-6, atol);
}

// Every replica of a sharded run holds bitwise the master's parameters (the all-gather wrote them all).
inline void expect_replicas_equal_master(const ShardedRun& run) {
  const std::vector<Tensor> master = run.net->parameters();
  for (size_t d = 0; d < run.replicas.size(); ++d) {
    SCOPED_TRACE("replica " + std::to_string(d));
    for (size_t i = 0; i < master.size(); ++i) expect_close(run.replicas[d][i], master[i], 0.0, 0.0);
  }
}

// Two runs clipped to max_norm: the same norms and parameters within 1e-6 relative, the clipping applied (norms above
// max_norm).
inline void expect_clipped_runs_equal(const ShardedRun& stage0, const ShardedRun& stage1, double max_norm,
                                      double atol = 1e-7) {
  ASSERT_EQ(stage1.norms.size(), stage0.norms.size());
  size_t clipped = 0;
  for (size_t step = 0; step < stage0.norms.size(); ++step) {
    EXPECT_NEAR(stage1.norms[step], stage0.norms[step], 1e-6 * stage0.norms[step]) << "step " << step;
    if (stage0.norms[step] > max_norm) ++clipped;
  }
  EXPECT_GT(clipped, 0U);
  expect_parameters_close(*stage1.net, *stage0.net, 1e-6, atol);
}

}  // namespace tandem::testing
