// ZeRO stage 1 across the processes of a job (every process runs every test), on one and on two virtual CPU devices
// per process and on GPUs (group_devices.h): sharded SGD with momentum, Adam and AdamW over every device of every
// process equal stage 0 with the plain optimizer, bitwise from run to run, with 1/N of the optimizer state on each of
// the N devices, clipping over the shards and TrainingStep over them included. Run alone (no launcher) the group has
// one process and the same expectations hold.

#include "distributed/group_devices.h"
#include "parallel/sharded_test_helpers.h"

namespace tandem::testing {
namespace {

class ShardedTraining : public OnGroupDevices {};

TEST_P(ShardedTraining, StageOneEqualsStageZero) {
  for (const UpdateRule rule : {UpdateRule::SgdMomentum, UpdateRule::Adam, UpdateRule::AdamW}) {
    SCOPED_TRACE(rule_name(rule));
    const ShardedRun stage0 = train_sharded(group_, 0, rule);
    const ShardedRun stage1 = train_sharded(group_, 1, rule);
    expect_parameters_close(*stage1.net, *stage0.net, 1e-6, reference_atol(GetParam()) / 10);
    expect_replicas_equal_master(stage1);
    expect_parameters_close(*train_sharded(group_, 1, rule).net, *stage1.net, 0.0, 0.0);
  }
}

TEST_P(ShardedTraining, StateBytesPerDeviceAreOneNth) {
  const ShardedRun stage0 = train_sharded(group_, 0, UpdateRule::Adam, 1);
  const ShardedRun stage1 = train_sharded(group_, 1, UpdateRule::Adam, 1);
  const size_t world = group_->world_devices();
  ASSERT_EQ(stage1.state_bytes.size(), group_->devices().size());
  const size_t padding = static_cast<size_t>(stage1.padded_numel) - 241;  // the net's 241 parameter elements
  for (size_t d = 0; d < stage1.state_bytes.size(); ++d) {
    SCOPED_TRACE("device " + std::to_string(d));
    EXPECT_EQ(stage1.state_bytes[d] * world, stage0.state_bytes[0] + 2 * sizeof(float) * padding);
  }
}

// Note [Clipping over shards]: the norm all-reduced over every device's shards equals clip_grad_norm_'s at stage 0.
TEST_P(ShardedTraining, ClippingOverShardsEqualsStageZero) {
  constexpr double kMaxNorm = 0.5;
  for (const UpdateRule rule : {UpdateRule::SgdMomentum, UpdateRule::AdamW}) {
    SCOPED_TRACE(rule_name(rule));
    const ShardedRun stage0 = train_sharded(group_, 0, rule, kShardedSteps, kMaxNorm);
    const ShardedRun stage1 = train_sharded(group_, 1, rule, kShardedSteps, kMaxNorm);
    expect_clipped_runs_equal(stage0, stage1, kMaxNorm, reference_atol(GetParam()) / 10);
    expect_replicas_equal_master(stage1);
  }
}

// Note [Training steps over shards]: TrainingStep with ShardedAdamW and clipping equals ReplicatedAdamW at stage 0.
TEST_P(ShardedTraining, TrainingStepOverShardsEqualsStageZero) {
  const ShardedRun stage0 = train_steps_sharded(group_, 0);
  const ShardedRun stage1 = train_steps_sharded(group_, 1);
  expect_step_runs_equal(stage0, stage1, reference_atol(GetParam()) / 10);
  expect_replicas_equal_master(stage1);
}

TANDEM_INSTANTIATE_ON_GROUP_DEVICES(LocalDevices, ShardedTraining);

}  // namespace
}  // namespace tandem::testing
