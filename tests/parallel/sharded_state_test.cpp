// A ShardedOptimizer's state in the plain optimizer's per-parameter form (tandem/parallel/sharded_state.h): Adam's
// moments and step counts gathered from 2 and 3 CPU devices equal those of the plain optimizer over the same run,
// and scattered into another world size they gather back bitwise.

#include "tandem/parallel/sharded_state.h"

#include "parallel/sharded_test_helpers.h"

namespace tandem::testing {
namespace {

optim::OptimizerState sharded_adam_state(size_t devices, int zero_stage, size_t steps,
                                         const optim::OptimizerState* load = nullptr) {
  const auto group = comm::ProcessGroup::single(virtual_devices(devices));
  const auto net = distributed_net(group->devices()[0]);
  parallel::DistributedDataParallel ddp(net, group, {.bucket_size = 128, .zero_stage = zero_stage});
  if (zero_stage == 0) {
    optim::Adam plain(ddp.parameters(), kShardedAdam);
    train_module_form(ddp, plain, steps);
    return plain.state_dict();
  }
  parallel::ShardedAdam sharded(ddp, kShardedAdam);
  train_module_form(ddp, sharded, steps);
  if (load != nullptr) parallel::scatter_optimizer_state(sharded, *load);
  return parallel::gather_optimizer_state(sharded);
}

void expect_states_close(const optim::OptimizerState& got, const optim::OptimizerState& want, double rtol) {
  ASSERT_EQ(got.parameters.size(), want.parameters.size());
  for (size_t i = 0; i < want.parameters.size(); ++i) {
    SCOPED_TRACE("parameter " + std::to_string(i));
    EXPECT_EQ(got.parameters[i].step, want.parameters[i].step);
    ASSERT_EQ(got.parameters[i].tensors.size(), want.parameters[i].tensors.size());
    for (size_t s = 0; s < want.parameters[i].tensors.size(); ++s) {
      EXPECT_EQ(got.parameters[i].tensors[s].first, want.parameters[i].tensors[s].first);
      expect_close(got.parameters[i].tensors[s].second, want.parameters[i].tensors[s].second.to(Device::cpu()), rtol,
                   rtol);
    }
  }
}

TEST(ShardedState, GatheredEqualsThePlainOptimizersState) {
  const optim::OptimizerState plain = sharded_adam_state(1, 0, 5);
  for (const size_t devices : {size_t{1}, size_t{2}, size_t{3}}) {
    SCOPED_TRACE(std::to_string(devices) + " devices");
    expect_states_close(sharded_adam_state(devices, 1, 5), plain, 1e-6);
  }
}

TEST(ShardedState, ScatteredAtAnotherWorldSizeGathersBack) {
  const optim::OptimizerState written = sharded_adam_state(2, 1, 5);
  expect_states_close(sharded_adam_state(3, 1, 1, &written), written, 0.0);
  expect_states_close(sharded_adam_state(1, 1, 1, &written), written, 0.0);
}

}  // namespace
}  // namespace tandem::testing
