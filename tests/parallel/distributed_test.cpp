// DistributedDataParallel in one process (ProcessGroup::single): it is ReplicatedModule exactly, with its own
// forward/backward protocol, no_sync() and checks. The multi-process tests are in tests/distributed/ddp_test.cpp.

#include "parallel/distributed_test_helpers.h"

namespace tandem::testing {
namespace {

using parallel::DistributedDataParallel;

const std::vector<Device> kTwoCpus = {Device::cpu(0), Device::cpu(1)};

// A group of one process is ReplicatedModule: the same parameters after 20 SGD steps with momentum, for both ways of
// running a step and both reductions (an average over one process is the sum).
TEST(DistributedDataParallel, OneProcessIsReplicatedModule) {
  for (const size_t devices : {size_t{1}, size_t{2}}) {
    const auto reference = train_reference(devices);
    for (const comm::ReduceOp reduction : {comm::ReduceOp::Sum, comm::ReduceOp::Average}) {
      for (const DdpPath path : {DdpPath::ForwardThenBackward, DdpPath::ForwardBackward}) {
        SCOPED_TRACE(std::to_string(devices) + " devices, " +
                     (reduction == comm::ReduceOp::Sum ? "sum, " : "average, ") +
                     (path == DdpPath::ForwardBackward ? "forward_backward" : "forward then backward"));
        const auto group = comm::ProcessGroup::single(virtual_devices(devices));
        expect_parameters_close(*train_distributed(group, reduction, path), *reference, 0.0, 0.0);
      }
    }
  }
}

// no_sync(): the micro-batches before the last accumulate locally, the last one reduces everything.
TEST(DistributedDataParallel, NoSyncAccumulatesLikeOneStepOverEveryMicroBatch) {
  const auto reference = train_reference(2, 6, /*micro_batches=*/3);
  for (const DdpPath path : {DdpPath::ForwardThenBackward, DdpPath::ForwardBackward}) {
    SCOPED_TRACE(path == DdpPath::ForwardBackward ? "forward_backward" : "forward then backward");
    const auto trained = train_distributed(comm::ProcessGroup::single(kTwoCpus), comm::ReduceOp::Average, path, 6, 3);
    expect_parameters_close(*trained, *reference);
  }
}

TEST(DistributedDataParallel, NoSyncStartsNoCollectiveAndNests) {
  DistributedDataParallel ddp(distributed_net(), comm::ProcessGroup::single(kTwoCpus), {.bucket_size = 128});
  const Shard shard = shard_of(distributed_batch(0), 2, 0, kTwoCpus);
  EXPECT_TRUE(ddp.syncing());
  {
    const auto outer = ddp.no_sync();
    {
      const auto inner = ddp.no_sync();
      EXPECT_FALSE(ddp.syncing());
    }
    EXPECT_FALSE(ddp.syncing());
    ddp.forward_backward(shard.x, weighted_mse(shard));
    ddp.reduce_gradients();  // nothing inside no_sync()
    EXPECT_NE(ddp.replicated().gradient_buffer(0).to_vector(), ddp.replicated().gradient_buffer(1).to_vector())
        << "each replica keeps its own gradients";
  }
  EXPECT_TRUE(ddp.syncing());
  ddp.reduce_gradients();  // outside no_sync() with no step open: reduces what was accumulated
  expect_close(ddp.replicated().gradient_buffer(1), ddp.replicated().gradient_buffer(0));
}

// A process without rows in a step runs nothing but takes part in the reduction with the gradients it holds.
TEST(DistributedDataParallel, AStepWithoutRowsReducesTheGradientsHeld) {
  for (const DdpPath path : {DdpPath::ForwardThenBackward, DdpPath::ForwardBackward}) {
    DistributedDataParallel ddp(distributed_net(), comm::ProcessGroup::single(kTwoCpus), {.bucket_size = 128});
    ddp.zero_grad();
    for (const Tensor& buffer : {ddp.replicated().gradient_buffer(0), ddp.replicated().gradient_buffer(1)}) {
      NoGradGuard no_grad;
      Tensor(buffer).fill_(1.0f);
    }
    if (path == DdpPath::ForwardBackward) {
      EXPECT_TRUE(ddp.forward_backward({}, nullptr).empty());
    } else {
      EXPECT_TRUE(ddp.forward_replicas({}).empty());
      EXPECT_TRUE(ddp.replicated().step_open());
      ddp.reduce_gradients();
    }
    EXPECT_FALSE(ddp.replicated().step_open());
    for (size_t r = 0; r < 2; ++r) {
      const Tensor buffer = ddp.replicated().gradient_buffer(r);
      expect_values(buffer, std::vector<double>(static_cast<size_t>(buffer.numel()), 2.0), buffer.shape());
    }
  }
}

TEST(DistributedDataParallel, ForwardWithoutGradientsOpensNoStep) {
  DistributedDataParallel ddp(distributed_net(), comm::ProcessGroup::single(kTwoCpus));
  const Shard shard = shard_of(distributed_batch(0), 2, 0, kTwoCpus);
  {
    NoGradGuard no_grad;
    EXPECT_EQ(ddp.forward_replicas(shard.x).size(), 2u);
  }
  EXPECT_FALSE(ddp.replicated().step_open());
  ddp.forward_replicas(shard.x);
  EXPECT_TRUE(ddp.replicated().step_open());
}

TEST(DistributedDataParallel, Errors) {
  const auto group = comm::ProcessGroup::single(kTwoCpus);
  EXPECT_ERROR(DistributedDataParallel(nullptr, group), "parallel::DistributedDataParallel: module is null");
  EXPECT_ERROR(DistributedDataParallel(distributed_net(), nullptr), "parallel::DistributedDataParallel: group is null");
  EXPECT_ERROR(DistributedDataParallel(make_net(Device::cpu(1)), group),
               "parallel::ReplicatedModule: parameter 'fc1.weight' is on cpu:1 but expected cpu:0 (devices[0])");

  DistributedDataParallel ddp(distributed_net(), group);
  const Shard shard = shard_of(distributed_batch(0), 2, 0, kTwoCpus);
  ddp.forward_replicas(shard.x);
  EXPECT_ERROR(
      ddp.forward_replicas(shard.x),
      "parallel::DistributedDataParallel::forward_replicas: the step opened by the previous forward is still open; "
      "call reduce_gradients() after each backward");
  EXPECT_ERROR(ddp.zero_grad(), "parallel::ReplicatedModule::zero_grad: the step opened by prepare_for_backward()");
  ddp.reduce_gradients();
  ddp.zero_grad();
  EXPECT_ERROR(ddp.forward_replicas({shard.x[0], shard.x[1], shard.x[0]}),
               "parallel::ReplicatedModule::forward_replicas: got 3 inputs for 2 replicas");
  EXPECT_FALSE(ddp.replicated().step_open());
}

}  // namespace
}  // namespace tandem::testing
