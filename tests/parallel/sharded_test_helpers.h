#pragma once
// ZeRO stage 1 (DistributedOptions::zero_stage = 1 with a parallel::ShardedOptimizer) against stage 0 with a plain
// optimizer over the master's parameters, both trained PyTorch-style through the module form, shared by the
// in-process tests (tests/parallel) and the multi-process ones (tests/distributed).

#include <memory>
#include <string>
#include <vector>

#include "parallel/distributed_test_helpers.h"
#include "tandem/optim/adam.h"
#include "tandem/optim/sgd.h"
#include "tandem/parallel/sharded_optimizer.h"

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

// This process's rows of step `step` (12: every device of a process of up to 4 devices gets some).
inline DistributedBatch process_batch(size_t step, int rank) {
  const auto seed = 31 * static_cast<uint64_t>(rank) + step;
  return {seeded_randn({12, 10}, Device::cpu(0), 900 + seed), seeded_randn({12, 1}, Device::cpu(0), 1300 + seed)};
}

struct ShardedRun {
  std::shared_ptr<TwoLayerNet> net;           // the master after training
  std::vector<std::vector<Tensor>> replicas;  // [replica][parameter], copies taken after training
  std::vector<size_t> state_bytes;            // per local device (stage 0: the master's optimizer's)
  int64_t padded_numel = 0;                   // elements of one flat gradient buffer, padding included
};

template <typename Optimizer>
void train_module_form(parallel::DistributedDataParallel& ddp, Optimizer& optimizer, size_t steps) {
  for (size_t step = 0; step < steps; ++step) {
    optimizer.zero_grad();
    const DistributedBatch batch = process_batch(step, ddp.group()->rank());
    const Device first = ddp.group()->devices()[0];
    const Tensor out = ddp(batch.x.to(first));
    nn::mse_loss(out, batch.y.to(first)).backward();
    optimizer.step();
  }
}

// `steps` steps of `rule` over `group` (bucket_size 128: three buckets of 21, 20 and 200 elements before padding, so
// parameters straddle the devices' chunks).
inline ShardedRun train_sharded(const std::shared_ptr<comm::ProcessGroup>& group, int zero_stage, UpdateRule rule,
                                size_t steps = kShardedSteps) {
  ShardedRun run;
  run.net = distributed_net(group->devices()[0]);
  parallel::DistributedDataParallel ddp(run.net, group, {.bucket_size = 128, .zero_stage = zero_stage});
  if (zero_stage == 0) {
    std::unique_ptr<optim::Optimizer> plain;
    if (rule == UpdateRule::SgdMomentum) plain = std::make_unique<optim::SGD>(ddp.parameters(), kShardedSgd);
    if (rule == UpdateRule::Adam) plain = std::make_unique<optim::Adam>(ddp.parameters(), kShardedAdam);
    if (rule == UpdateRule::AdamW) plain = std::make_unique<optim::AdamW>(ddp.parameters(), kShardedAdamW);
    train_module_form(ddp, *plain, steps);
    run.state_bytes.push_back(parallel::optimizer_state_bytes(*plain));
  } else {
    std::unique_ptr<parallel::ShardedOptimizer> sharded;
    if (rule == UpdateRule::SgdMomentum) sharded = std::make_unique<parallel::ShardedSGD>(ddp, kShardedSgd);
    if (rule == UpdateRule::Adam) sharded = std::make_unique<parallel::ShardedAdam>(ddp, kShardedAdam);
    if (rule == UpdateRule::AdamW) sharded = std::make_unique<parallel::ShardedAdamW>(ddp, kShardedAdamW);
    train_module_form(ddp, *sharded, steps);
    for (size_t d = 0; d < sharded->size(); ++d) run.state_bytes.push_back(sharded->optimizer_state_bytes(d));
  }
  for (const std::shared_ptr<nn::Module>& replica : ddp.replicated().replicas()) {
    run.replicas.emplace_back();
    for (const Tensor& parameter : replica->parameters()) run.replicas.back().push_back(parameter.detach().clone());
  }
  run.padded_numel = ddp.replicated().gradient_layout().numel();
  return run;
}

// Every replica of a stage 1 run holds bitwise the master's parameters (the all-gather wrote them all).
inline void expect_replicas_equal_master(const ShardedRun& run) {
  const std::vector<Tensor> master = run.net->parameters();
  for (size_t d = 0; d < run.replicas.size(); ++d) {
    SCOPED_TRACE("replica " + std::to_string(d));
    for (size_t i = 0; i < master.size(); ++i) expect_close(run.replicas[d][i], master[i], 0.0, 0.0);
  }
}

}  // namespace tandem::testing
