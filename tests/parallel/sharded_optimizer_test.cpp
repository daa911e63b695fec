// ZeRO stages 1 and 2 in one process over 1, 2 and 3 virtual CPU devices (ProcessGroup::single): sharded SGD with
// momentum, Adam and AdamW equal stage 0 with the plain optimizer, run after run bitwise, with 1/N of the optimizer
// state per device (and at stage 2 of the gradients); and what the stages refuse. The multi-process runs are in
// tests/distributed/sharded_optimizer_test.cpp.

#include <algorithm>

#include "parallel/sharded_test_helpers.h"
#include "tandem/parallel/training_step.h"

namespace tandem::testing {
namespace {

using parallel::DistributedDataParallel;
using parallel::DistributedOptions;

const std::vector<Device> kShardedPair = {Device::cpu(0), Device::cpu(1)};

// 50 steps of each update rule: stages 1 and 2 equal stage 0 within 1e-6 relative, every replica holds the
// master's parameters, and a second sharded run gives bitwise the same parameters.
TEST(ShardedOptimizer, ShardedStagesEqualStageZero) {
  for (const size_t devices : {size_t{1}, size_t{2}, size_t{3}}) {
    for (const UpdateRule rule : {UpdateRule::SgdMomentum, UpdateRule::Adam, UpdateRule::AdamW}) {
      const auto group = comm::ProcessGroup::single(virtual_devices(devices));
      const ShardedRun stage0 = train_sharded(group, 0, rule);
      for (const int stage : kShardedStages) {
        SCOPED_TRACE(std::to_string(devices) + " devices, " + rule_name(rule) + ", stage " + std::to_string(stage));
        const ShardedRun sharded = train_sharded(group, stage, rule);
        expect_parameters_close(*sharded.net, *stage0.net, 1e-6, 1e-7);
        expect_replicas_equal_master(sharded);
        expect_parameters_close(*train_sharded(group, stage, rule).net, *sharded.net, 0.0, 0.0);
      }
    }
  }
}

// Note [Clipping over shards]: ShardedOptimizer::clip_grad_norm then step equals nn::utils::clip_grad_norm_ then step
// at stage 0, norm for norm and over 50 steps.
TEST(ShardedOptimizer, ClippingOverShardsEqualsStageZero) {
  constexpr double kMaxNorm = 0.5;
  for (const size_t devices : {size_t{1}, size_t{2}, size_t{3}}) {
    for (const UpdateRule rule : {UpdateRule::SgdMomentum, UpdateRule::AdamW}) {
      const auto group = comm::ProcessGroup::single(virtual_devices(devices));
      const ShardedRun stage0 = train_sharded(group, 0, rule, kShardedSteps, kMaxNorm);
      for (const int stage : kShardedStages) {
        SCOPED_TRACE(std::to_string(devices) + " devices, " + rule_name(rule) + ", stage " + std::to_string(stage));
        const ShardedRun sharded = train_sharded(group, stage, rule, kShardedSteps, kMaxNorm);
        expect_clipped_runs_equal(stage0, sharded, kMaxNorm);
        expect_replicas_equal_master(sharded);
      }
    }
  }
  const auto group = comm::ProcessGroup::single(kShardedPair);
  DistributedDataParallel ddp(distributed_net(), group, {.zero_stage = 1});
  parallel::ShardedSGD sgd(ddp, kShardedSgd);
  EXPECT_ERROR(sgd.clip_grad_norm(-1.0), "parallel::ShardedSGD::clip_grad_norm: max_norm must be >= 0, got -1");
}

// Note [Training steps over shards]: TrainingStep with a ShardedAdamW, clipping, equals it with a ReplicatedAdamW at
// stage 0 over 50 steps; on CPU devices its steps run eagerly, saying why they are not captured.
TEST(ShardedOptimizer, TrainingStepOverShardsEqualsStageZero) {
  for (const size_t devices : {size_t{1}, size_t{2}, size_t{3}}) {
    SCOPED_TRACE(std::to_string(devices) + " devices");
    const auto group = comm::ProcessGroup::single(virtual_devices(devices));
    const ShardedRun stage0 = train_steps_sharded(group, 0);
    for (const int stage : kShardedStages) {
      SCOPED_TRACE("stage " + std::to_string(stage));
      const ShardedRun sharded = train_steps_sharded(group, stage);
      expect_step_runs_equal(stage0, sharded);
      expect_replicas_equal_master(sharded);
      EXPECT_EQ(std::count(sharded.strategies.begin(), sharded.strategies.end(), parallel::StepStrategy::Eager),
                static_cast<std::ptrdiff_t>(kShardedSteps));
      EXPECT_NE(sharded.fallback_reason.find("capture needs CUDA devices"), std::string::npos)
          << sharded.fallback_reason;
    }
  }
}

// Note [Training steps over shards]: on GPUs the sharded step is captured after the warm-up (the reduce-scatters,
// the norm's all-reduce and the all-gathers inside the graph) and gives bitwise the eager sharded step's losses and
// parameters, and stage 0's within 1e-6 relative.
void expect_captured_shards_equal_eager(const std::vector<Device>& devices) {
  const auto group = comm::ProcessGroup::single(devices);
  const ShardedRun eager = train_steps_sharded(group, 1, kShardedSteps, 0.5, /*capture=*/false);
  const ShardedRun captured = train_steps_sharded(group, 1);
  const ShardedRun stage0 = train_steps_sharded(group, 0);
  for (size_t s = 0; s < kShardedSteps; ++s) {
    EXPECT_EQ(captured.strategies[s], s < 2 ? parallel::StepStrategy::Eager : parallel::StepStrategy::Captured)
        << "step " << s << ": " << captured.fallback_reason;
    EXPECT_EQ(captured.losses[s], eager.losses[s]) << "step " << s;
  }
  expect_parameters_close(*captured.net, *eager.net, 0.0, 0.0);
  expect_replicas_equal_master(captured);
  expect_step_runs_equal(stage0, captured);
  // Stage 2 stages its gradients in tensors allocated during backward: its steps run eagerly, saying so.
  const ShardedRun stage2 = train_steps_sharded(group, 2);
  EXPECT_EQ(std::count(stage2.strategies.begin(), stage2.strategies.end(), parallel::StepStrategy::Eager),
            static_cast<std::ptrdiff_t>(kShardedSteps));
  EXPECT_NE(stage2.fallback_reason.find("staged bucket by bucket (DistributedOptions::zero_stage 2)"),
            std::string::npos)
      << stage2.fallback_reason;
  expect_step_runs_equal(stage0, stage2);
}

TEST(ShardedOptimizerCUDA, CapturedStepsOnOneGpuEqualTheEagerOnesBitwise) {
  TANDEM_REQUIRE_GPUS(1);
  expect_captured_shards_equal_eager({Device::cuda(0)});
}

TEST(ShardedOptimizerMultiCUDA, CapturedStepsOnTwoGpusEqualTheEagerOnesBitwise) {
  TANDEM_REQUIRE_GPUS(2);
  expect_captured_shards_equal_eager({Device::cuda(0), Device::cuda(1)});
}

// Adam's two moments: each of N devices holds those of its chunks only, 1/N of stage 0's plus the padding; at stage 2
// also 1/N of the gradients.
TEST(ShardedOptimizer, StateBytesPerDeviceAreOneNth) {
  for (const size_t devices : {size_t{2}, size_t{3}}) {
    const auto group = comm::ProcessGroup::single(virtual_devices(devices));
    const ShardedRun stage0 = train_sharded(group, 0, UpdateRule::AdamW, 1);
    const int64_t numel = 241;  // 10 * 20 + 20 + 20 * 1 + 1
    ASSERT_EQ(stage0.state_bytes.size(), 1U);
    EXPECT_EQ(stage0.state_bytes[0], 2 * sizeof(float) * numel);
    EXPECT_EQ(stage0.gradient_numel, std::vector<int64_t>(devices, numel));
    for (const int stage : kShardedStages) {
      const ShardedRun sharded = train_sharded(group, stage, UpdateRule::AdamW, 1);
      ASSERT_EQ(sharded.state_bytes.size(), devices);
      EXPECT_LT(sharded.padded_numel - numel,
                static_cast<int64_t>(3 * devices));  // under one element per device per bucket
      for (size_t d = 0; d < devices; ++d) {
        SCOPED_TRACE(std::to_string(devices) + " devices, stage " + std::to_string(stage) + ", device " +
                     std::to_string(d));
        EXPECT_EQ(sharded.state_bytes[d] * devices, 2 * sizeof(float) * static_cast<size_t>(sharded.padded_numel));
        EXPECT_EQ(sharded.gradient_numel[d] * (stage == 2 ? static_cast<int64_t>(devices) : 1), sharded.padded_numel);
      }
    }
  }
}

TEST(ShardedOptimizer, BucketsArePaddedToTheDevices) {
  const auto group = comm::ProcessGroup::single(virtual_devices(3));
  DistributedDataParallel ddp(distributed_net(), group, {.bucket_size = 128, .zero_stage = 1});
  const parallel::GradientLayout& layout = ddp.replicated().gradient_layout();
  ASSERT_EQ(layout.buckets().size(), 3U);
  // Bucket 0: fc2 (21 elements, last in the buffer), bucket 1: fc1.bias (20), bucket 2: fc1.weight (200, first).
  EXPECT_EQ(layout.buckets()[2].start, 0);
  EXPECT_EQ(layout.buckets()[2].length, 201);
  EXPECT_EQ(layout.buckets()[1].start, 201);
  EXPECT_EQ(layout.buckets()[1].length, 21);
  EXPECT_EQ(layout.buckets()[0].start, 222);
  EXPECT_EQ(layout.buckets()[0].length, 21);
  EXPECT_EQ(layout.numel(), 243);
  EXPECT_EQ(layout.offset(1), 201);  // fc1.bias
  EXPECT_EQ(layout.offset(2), 222);  // fc2.weight
  EXPECT_EQ(layout.offset(3), 242);  // fc2.bias
  parallel::ShardedAdamW adamw(ddp, kShardedAdamW);
  for (size_t d = 0; d < 3; ++d) EXPECT_EQ(adamw.shard(d, 2).numel(), 67);
}

// One backward of the module form on `ddp` (the batch of step 0).
void sharded_backward(DistributedDataParallel& ddp) {
  const DistributedBatch batch = process_batch(0, 0);
  nn::mse_loss(ddp(batch.x), batch.y).backward();
}

// Note [Reduce-scattered buckets]: after a backward, each device's owned chunk of every bucket holds the reduction
// (stage 0's gradient), and the chunks it does not own hold its local gradients.
TEST(ShardedOptimizer, EachDeviceHoldsTheReductionOfItsChunksOnly) {
  const auto group = comm::ProcessGroup::single(kShardedPair);
  DistributedDataParallel stage0(distributed_net(), group, {.bucket_size = 128});
  DistributedDataParallel stage1(distributed_net(), group, {.bucket_size = 128, .zero_stage = 1});
  sharded_backward(stage0);
  sharded_backward(stage1);
  const parallel::GradientLayout& layout = stage1.replicated().gradient_layout();
  const std::vector<Tensor> reduced = gradients_of(*stage0.module());
  for (size_t i = 0; i < layout.parameter_count(); ++i) {
    SCOPED_TRACE(layout.name(i));
    const parallel::GradientLayout::Bucket& bucket = layout.buckets()[layout.bucket_of(i)];
    const int64_t chunk = bucket.length / 2;
    const int64_t numel = reduced[i].numel();
    const Tensor expected = reduced[i].reshape({numel});
    for (int64_t k = 0; k < numel; ++k) {
      const int64_t at = layout.offset(i) + k;
      const auto owner = static_cast<size_t>((at - bucket.start) / chunk);
      const float held = stage1.replicated().gradient_buffer(owner).data()[at];
      EXPECT_EQ(held, expected.data()[k]) << "element " << k;
    }
  }
  // fc1.weight's first element lies in device 0's chunk: device 1 holds its own gradient there, not the sum.
  EXPECT_NE(stage1.replicated().gradient_buffer(1).data()[0], reduced[0].reshape({reduced[0].numel()}).data()[0]);
}

// Each device's shard at stage 2 against stage 0's reduced gradients: the owned chunk of every bucket, and nothing
// else (padding zero).
void expect_shards_hold(const DistributedDataParallel& stage2, const std::vector<Tensor>& reduced) {
  const parallel::GradientReducer& reducer = stage2.replicated().gradient_reducer();
  const parallel::GradientLayout& layout = reducer.layout();
  const size_t devices = stage2.replicated().size();
  std::vector<std::vector<float>> expected(devices);  // [device]: its shard
  for (size_t d = 0; d < devices; ++d) {
    expected[d].assign(static_cast<size_t>(layout.numel() / static_cast<int64_t>(devices)), 0.0F);
  }
  for (size_t i = 0; i < layout.parameter_count(); ++i) {
    const size_t b = layout.bucket_of(i);
    const parallel::GradientLayout::Bucket& bucket = layout.buckets()[b];
    const int64_t chunk = bucket.length / static_cast<int64_t>(devices);
    const Tensor flat = reduced[i].reshape({reduced[i].numel()});
    for (int64_t k = 0; k < flat.numel(); ++k) {
      const int64_t at = layout.offset(i) + k - bucket.start;  // in the bucket
      const auto owner = static_cast<size_t>(at / chunk);
      const int64_t in_shard = reducer.owned_gradients(owner, b).storage_offset() + at - reducer.owned_offset(owner, b);
      expected[owner][static_cast<size_t>(in_shard)] = flat.data()[k];
    }
  }
  for (size_t d = 0; d < devices; ++d) {
    SCOPED_TRACE("device " + std::to_string(d));
    const Tensor& shard = stage2.replicated().gradient_buffer(d);
    ASSERT_EQ(shard.numel(), static_cast<int64_t>(expected[d].size()));
    for (size_t k = 0; k < expected[d].size(); ++k) EXPECT_EQ(shard.data()[k], expected[d][k]) << "element " << k;
  }
}

// Note [Staged gradient buckets]: after a backward at stage 2, device d's shard holds stage 0's reduced gradients on
// the chunks it owns, bucket after bucket, and no replica parameter holds a .grad.
TEST(ShardedOptimizer, StageTwoKeepsEachDevicesShardOfTheReducedGradientsOnly) {
  for (const size_t devices : {size_t{1}, size_t{2}, size_t{3}}) {
    SCOPED_TRACE(std::to_string(devices) + " devices");
    const auto group = comm::ProcessGroup::single(virtual_devices(devices));
    DistributedDataParallel stage0(distributed_net(), group, {.bucket_size = 128});
    DistributedDataParallel stage2(distributed_net(), group, {.bucket_size = 128, .zero_stage = 2});
    sharded_backward(stage0);
    sharded_backward(stage2);
    expect_shards_hold(stage2, gradients_of(*stage0.module()));
    for (const std::shared_ptr<nn::Module>& replica : stage2.replicated().replicas()) {
      for (const Tensor& parameter : replica->parameters()) EXPECT_FALSE(parameter.grad().defined());
    }
    stage2.zero_grad();
    for (size_t d = 0; d < devices; ++d) {
      EXPECT_EQ(sum(abs(stage2.replicated().gradient_buffer(d))).item(), 0.0F);
    }
  }
}

// Backwards without zero_grad() between them add into the shards, with a reduction each, or once for those run inside
// no_sync(): the shards hold stage 0's accumulated gradients after the same sequence.
TEST(ShardedOptimizer, StageTwoAccumulatesIntoTheShards) {
  const auto group = comm::ProcessGroup::single(virtual_devices(3));
  DistributedDataParallel stage0(distributed_net(), group, {.bucket_size = 128});
  DistributedDataParallel stage2(distributed_net(), group, {.bucket_size = 128, .zero_stage = 2});
  for (DistributedDataParallel* ddp : {&stage0, &stage2}) {
    for (size_t step = 0; step < 4; ++step) {
      const DistributedBatch batch = process_batch(step, 0);
      if (step == 2) {
        const auto no_sync = ddp->no_sync();
        nn::mse_loss((*ddp)(batch.x), batch.y).backward();
      } else {
        nn::mse_loss((*ddp)(batch.x), batch.y).backward();
      }
    }
  }
  const std::vector<Tensor> reduced = gradients_of(*stage0.module());
  const parallel::GradientLayout& layout = stage2.replicated().gradient_layout();
  const parallel::GradientReducer& reducer = stage2.replicated().gradient_reducer();
  for (size_t d = 0; d < 3; ++d) {
    for (size_t b = 0; b < layout.buckets().size(); ++b) {
      const Tensor owned = reducer.owned_gradients(d, b);
      const int64_t first = layout.buckets()[b].start + reducer.owned_offset(d, b);
      for (int64_t k = 0; k < owned.numel(); ++k) {
        // The parameter element at position first + k of the padded flat buffer, if any.
        for (size_t i = 0; i < layout.parameter_count(); ++i) {
          const int64_t at = first + k - layout.offset(i);
          if (at < 0 || at >= reduced[i].numel()) continue;
          EXPECT_NEAR(owned.data()[k], reduced[i].reshape({reduced[i].numel()}).data()[at],
                      1e-6 * std::abs(reduced[i].reshape({reduced[i].numel()}).data()[at]) + 1e-7)
              << layout.name(i) << " element " << at << ", device " << d;
        }
      }
    }
  }
}

TEST(ShardedOptimizer, ZeroStageIsValidated) {
  const auto group = comm::ProcessGroup::single(kShardedPair);
  for (const int stage : {-1, 3}) {
    EXPECT_ERROR(DistributedDataParallel(distributed_net(), group, {.zero_stage = stage}),
                 "parallel::DistributedDataParallel: DistributedOptions::zero_stage is " + std::to_string(stage) +
                     " but expected 0, 1 or 2");
  }
  DistributedDataParallel stage0(distributed_net(), group);
  EXPECT_ERROR(parallel::ShardedSGD(stage0, kShardedSgd),
               "parallel::ShardedSGD: the DistributedDataParallel has DistributedOptions::zero_stage 0");
}

// What both sharded stages refuse: a plain optimizer over the parameters, the replicated ones, clip_grad_norm_, a
// TrainingStep with a replicated optimizer or with a sharded one over another model, and a step on the local gradients
// of a backward inside no_sync(); at stage 1 also gradients accumulated onto the reduce-scattered ones.
TEST(ShardedOptimizer, ShardedStagesRefuseWhatTheyDoNotSupport) {
  const auto group = comm::ProcessGroup::single(kShardedPair);
  for (const int stage : kShardedStages) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    DistributedDataParallel ddp(distributed_net(), group, {.bucket_size = 128, .zero_stage = stage});
    sharded_backward(ddp);
    // A plain optimizer over the parameters, and the replicated ones, read gradients that are only sharded.
    optim::AdamW plain(ddp.parameters(), kShardedAdamW);
    EXPECT_ERROR(plain.step(),
                 "optim::AdamW::step: the gradient of 'fc1.weight' is reduce-scattered "
                 "(DistributedOptions::zero_stage >= 1)");
    EXPECT_ERROR(plain.step(), "step with parallel::ShardedOptimizer (ShardedSGD, ShardedAdam, ShardedAdamW)");
    parallel::ReplicatedAdamW replicated(ddp.replicated(), kShardedAdamW);
    EXPECT_ERROR(replicated.step(), "is reduce-scattered (DistributedOptions::zero_stage >= 1)");
    EXPECT_ERROR(nn::utils::clip_grad_norm_(ddp.parameters(), 1.0),
                 "nn::utils::clip_grad_norm_: the gradient of 'fc1.weight' is reduce-scattered");
    // TrainingStep over a replicated optimizer, and a sharded one over another model.
    DistributedDataParallel summing(distributed_net(), group, {.reduction = comm::ReduceOp::Sum, .zero_stage = stage});
    parallel::ReplicatedSGD sgd(summing.replicated(), kShardedSgd);
    EXPECT_ERROR(parallel::TrainingStep(summing, sgd),
                 "parallel::TrainingStep: the DistributedDataParallel has DistributedOptions::zero_stage " +
                     std::to_string(stage) + ", which shards the optimizer state, but the optimizer is replicated");
    parallel::ShardedSGD other(ddp, kShardedSgd);
    EXPECT_ERROR(parallel::TrainingStep(summing, other),
                 "parallel::TrainingStep: the sharded optimizer was built over another DistributedDataParallel");

    parallel::ShardedAdamW adamw(ddp, kShardedAdamW);
    adamw.step();
    if (stage == 1) {  // stage 2 adds the next reduction into its shards (StageTwoAccumulatesIntoTheShards)
      EXPECT_ERROR(sharded_backward(ddp),
                   "zero the gradients (the sharded optimizer's zero_grad()) before the next backward");
    }
    // A backward inside no_sync() leaves gradients that the sharded optimizer refuses, as every optimizer does.
    adamw.zero_grad();
    {
      const auto no_sync = ddp.no_sync();
      sharded_backward(ddp);
    }
    EXPECT_ERROR(adamw.step(),
                 "parallel::ShardedAdamW::step: the gradient of 'fc1.weight' is not reduced over the "
                 "processes of ReplicatedModule: the last backward ran inside no_sync()");
    sharded_backward(ddp);  // reduces everything accumulated
    adamw.step();
  }
}

}  // namespace
}  // namespace tandem::testing
