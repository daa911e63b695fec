// A ShardedOptimizer's state in the plain optimizer's per-parameter form (tandem/parallel/sharded_state.h): Adam's
// moments and step counts gathered from 2 and 3 CPU devices equal those of the plain optimizer over the same run,
// and scattered into another world size they gather back bitwise.

#include "tandem/parallel/sharded_state.h"

#include <algorithm>

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

// stream_optimizer_state gives the gathered state a tensor at a time, the host holding one bucket slot at a time:
// the most allocated while every source is asked (and dropped) stays far below the whole state.
TEST(ShardedState, StreamedStateHoldsOneBucketSlotAtATime) {
  const auto group = comm::ProcessGroup::single(virtual_devices(3));
  // Six buckets of one Linear(64, 64) each (4,160 elements), the first with the input layer.
  const auto net =
      std::make_shared<nn::Sequential>(nn::Linear(10, 64), nn::Linear(64, 64), nn::Linear(64, 64), nn::Linear(64, 64),
                                       nn::Linear(64, 64), nn::Linear(64, 64), nn::Linear(64, 1));
  parallel::DistributedDataParallel ddp(net, group, {.bucket_size = 16 * 1024, .zero_stage = 1});
  parallel::ShardedAdam sharded(ddp, kShardedAdam);
  train_module_form(ddp, sharded, 2);
  const optim::OptimizerState gathered = parallel::gather_optimizer_state(sharded);
  size_t state_bytes = 0;
  for (const optim::ParameterState& parameter : gathered.parameters) {
    for (const auto& slot : parameter.tensors) state_bytes += static_cast<size_t>(slot.second.numel()) * sizeof(float);
  }
  int64_t largest_bucket = 0;
  for (const auto& bucket : ddp.replicated().gradient_layout().buckets()) {
    largest_bucket = std::max(largest_bucket, bucket.length);
  }
  ASSERT_GE(ddp.replicated().gradient_layout().buckets().size(), 5u);

  const optim::StreamedOptimizerState stream = parallel::stream_optimizer_state(sharded);
  EXPECT_EQ(stream.kind, gathered.kind);
  ASSERT_EQ(stream.steps.size(), gathered.parameters.size());
  for (size_t i = 0; i < stream.steps.size(); ++i) EXPECT_EQ(stream.steps[i], gathered.parameters[i].step);
  size_t slots = 0;
  for (const optim::StreamedSlot& slot : stream.slots) {
    const Tensor values = slot.tensor.values();
    EXPECT_EQ(slot.tensor.name, optim::optimizer_tensor_name(slot.parameter, slot.slot));
    EXPECT_EQ(values.shape(), slot.tensor.shape);
    const auto& want = gathered.parameters[slot.parameter].tensors;
    const auto found = std::find_if(want.begin(), want.end(), [&](const auto& s) { return s.first == slot.slot; });
    ASSERT_NE(found, want.end()) << slot.tensor.name;
    expect_close(values, found->second, 0.0, 0.0);
    ++slots;
  }
  size_t want_slots = 0;
  for (const optim::ParameterState& parameter : gathered.parameters) want_slots += parameter.tensors.size();
  EXPECT_EQ(slots, want_slots);

  // A second stream, each value dropped at once: the gather's result on each of the three devices, three of the
  // largest bucket, where gathering the whole state would hold all of it.
  const size_t before = memory_stats(Device::cpu()).allocated_bytes;
  reset_peak_memory_stats(Device::cpu());
  optim::drain(parallel::stream_optimizer_state(sharded));
  const size_t peak = memory_stats(Device::cpu()).peak_allocated_bytes - before;
  EXPECT_LE(peak, 4 * static_cast<size_t>(largest_bucket) * sizeof(float));
  EXPECT_LT(peak, state_bytes / 3);
}

}  // namespace
}  // namespace tandem::testing
