// ZeRO stages 1 and 2 across the processes of a job (every process runs every test), on one and on two virtual CPU
// devices per process and on GPUs (group_devices.h): sharded SGD with momentum, Adam and AdamW over every device of
// every process equal stage 0 with the plain optimizer, bitwise from run to run, with 1/N of the optimizer state on
// each of the N devices (and at stage 2 of the gradients), clipping over the shards and TrainingStep over them
// included. Run alone (no launcher) the group has one process and the same expectations hold.

#include "distributed/group_devices.h"
#include "parallel/sharded_test_helpers.h"

namespace tandem::testing {
namespace {

class ShardedTraining : public OnGroupDevices {};

TEST_P(ShardedTraining, ShardedStagesEqualStageZero) {
  for (const UpdateRule rule : {UpdateRule::SgdMomentum, UpdateRule::Adam, UpdateRule::AdamW}) {
    const ShardedRun stage0 = train_sharded(group_, 0, rule);
    for (const int stage : kShardedStages) {
      SCOPED_TRACE(rule_name(rule) + ", stage " + std::to_string(stage));
      const ShardedRun sharded = train_sharded(group_, stage, rule);
      expect_parameters_close(*sharded.net, *stage0.net, 1e-6, reference_atol(GetParam()) / 10);
      expect_replicas_equal_master(sharded);
      expect_parameters_close(*train_sharded(group_, stage, rule).net, *sharded.net, 0.0, 0.0);
    }
  }
}

TEST_P(ShardedTraining, StateBytesPerDeviceAreOneNth) {
  const ShardedRun stage0 = train_sharded(group_, 0, UpdateRule::Adam, 1);
  const size_t world = group_->world_devices();
  for (const int stage : kShardedStages) {
    const ShardedRun sharded = train_sharded(group_, stage, UpdateRule::Adam, 1);
    ASSERT_EQ(sharded.state_bytes.size(), group_->devices().size());
    const size_t padding = static_cast<size_t>(sharded.padded_numel) - 241;  // the net's 241 parameter elements
    for (size_t d = 0; d < sharded.state_bytes.size(); ++d) {
      SCOPED_TRACE("stage " + std::to_string(stage) + ", device " + std::to_string(d));
      EXPECT_EQ(sharded.state_bytes[d] * world, stage0.state_bytes[0] + 2 * sizeof(float) * padding);
      EXPECT_EQ(sharded.gradient_numel[d] * (stage == 2 ? static_cast<int64_t>(world) : 1), sharded.padded_numel);
    }
  }
}

// Note [Clipping over shards]: the norm all-reduced over every device's shards equals clip_grad_norm_'s at stage 0.
TEST_P(ShardedTraining, ClippingOverShardsEqualsStageZero) {
  constexpr double kMaxNorm = 0.5;
  for (const UpdateRule rule : {UpdateRule::SgdMomentum, UpdateRule::AdamW}) {
    SCOPED_TRACE(rule_name(rule));
    const ShardedRun stage0 = train_sharded(group_, 0, rule, kShardedSteps, kMaxNorm);
    for (const int stage : kShardedStages) {
      SCOPED_TRACE("stage " + std::to_string(stage));
      const ShardedRun sharded = train_sharded(group_, stage, rule, kShardedSteps, kMaxNorm);
      expect_clipped_runs_equal(stage0, sharded, kMaxNorm, reference_atol(GetParam()) / 10);
      expect_replicas_equal_master(sharded);
    }
  }
}

// Note [Training steps over shards]: TrainingStep with ShardedAdamW and clipping equals ReplicatedAdamW at stage 0.
TEST_P(ShardedTraining, TrainingStepOverShardsEqualsStageZero) {
  const ShardedRun stage0 = train_steps_sharded(group_, 0);
  for (const int stage : kShardedStages) {
    SCOPED_TRACE("stage " + std::to_string(stage));
    const ShardedRun sharded = train_steps_sharded(group_, stage);
    expect_step_runs_equal(stage0, sharded, reference_atol(GetParam()) / 10);
    expect_replicas_equal_master(sharded);
  }
}

TANDEM_INSTANTIATE_ON_GROUP_DEVICES(LocalDevices, ShardedTraining);

}  // namespace
}  // namespace tandem::testing
