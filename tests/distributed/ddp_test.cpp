// DistributedDataParallel across the processes of a job (every process runs every test), on one and on two virtual
// CPU devices per process and on GPUs (group_devices.h): each rank feeding its shard gives the parameters of one
// process on every device of the job (the reference, which each rank computes itself: ReplicatedModule over the job's
// number of virtual CPU devices). Run alone (no launcher) the group has one process and the same expectations hold.

#include "distributed/group_devices.h"
#include "parallel/distributed_test_helpers.h"

namespace tandem::testing {
namespace {

using comm::ProcessGroup;
using comm::ReduceOp;
using parallel::DistributedDataParallel;

class DistributedTraining : public OnGroupDevices {
 protected:
  size_t local() const { return group_->devices().size(); }
  size_t world() const { return group_->world_devices(); }
  size_t first_device() const { return static_cast<size_t>(group_->rank()) * local(); }
  Device device() const { return group_->devices()[0]; }  // where this process's model lives
  double atol() const { return reference_atol(GetParam()); }
};

// 2 processes x cpu:0 == one process on cpu:0,cpu:1; 2 processes x (cpu:0, cpu:1) == one process on 4 devices (and
// the same with 3 processes): 20 SGD steps with momentum, uneven batches and steps in which whole processes get no
// rows, both ways of running a step.
TEST_P(DistributedTraining, EachRankFeedingItsShardEqualsOneProcessOnEveryDevice) {
  const auto reference = train_reference(world());
  for (const DdpPath path : {DdpPath::ForwardThenBackward, DdpPath::ForwardBackward}) {
    SCOPED_TRACE(path == DdpPath::ForwardBackward ? "forward_backward" : "forward then backward");
    expect_parameters_close(*train_distributed(group_, ReduceOp::Average, path), *reference, 1e-5, atol());
  }
}

TEST_P(DistributedTraining, SumOfLossesWeightedByTheGlobalBatchEqualsOneProcess) {
  const auto reference = train_reference(world());
  expect_parameters_close(*train_distributed(group_, ReduceOp::Sum, DdpPath::ForwardThenBackward), *reference, 1e-5,
                          atol());
}

// Every replica of every process ends with the same parameters: the job stays in step.
TEST_P(DistributedTraining, EveryReplicaOfEveryProcessHoldsTheSameParameters) {
  auto net = distributed_net(device());
  DistributedDataParallel ddp(net, group_, {.bucket_size = 128});
  parallel::ReplicatedSGD sgd(ddp.replicated(), kDistributedSgd);
  for (size_t step = 0; step < 5; ++step) {
    ddp.zero_grad();
    ddp_micro_batch(ddp, distributed_batch(step), DdpPath::ForwardThenBackward);
    sgd.step();
  }
  for (size_t r = 1; r < local(); ++r) expect_parameters_close(*ddp.replicated().replicas()[r], *net, 0.0, 0.0);
  std::vector<Tensor> flat;  // this process's master parameters, gathered from every process
  for (const Tensor& parameter : net->parameters()) flat.push_back(parameter.reshape({parameter.numel()}));
  const Tensor mine = cat(flat, 0);
  std::vector<Tensor> per_device(local(), Tensor());
  for (size_t i = 0; i < local(); ++i) per_device[i] = mine.to(group_->devices()[i]);
  const std::vector<float> all = group_->all_gather(per_device).front().to_vector();
  const std::vector<float> values = mine.to_vector();
  for (size_t g = 0; g < world(); ++g) {
    const std::vector<float> theirs(all.begin() + static_cast<std::ptrdiff_t>(g * values.size()),
                                    all.begin() + static_cast<std::ptrdiff_t>((g + 1) * values.size()));
    EXPECT_EQ(theirs, values) << "global device " << g;
  }
}

// Gradient accumulation: two micro-batches inside no_sync() and the last one synced == one step over all three.
TEST_P(DistributedTraining, NoSyncAccumulationEqualsOneStepOverEveryMicroBatch) {
  const auto reference = train_reference(world(), 6, /*micro_batches=*/3);
  for (const DdpPath path : {DdpPath::ForwardThenBackward, DdpPath::ForwardBackward}) {
    SCOPED_TRACE(path == DdpPath::ForwardBackward ? "forward_backward" : "forward then backward");
    expect_parameters_close(*train_distributed(group_, ReduceOp::Average, path, 6, 3), *reference, 1e-5, atol());
  }
}

// Two synced micro-batches without zero_grad() in between: the second accumulates onto reduced gradients, which
// count once (for a sum only rank 0 keeps them, for an average every process).
TEST_P(DistributedTraining, AccumulatingOntoReducedGradientsCountsThemOnce) {
  auto reference_net = distributed_net();
  parallel::ReplicatedModule reference(reference_net, virtual_devices(world()), {.bucket_size = 128});
  for (size_t micro = 0; micro < 2; ++micro) {
    const Shard whole = shard_of(distributed_batch(micro), world(), 0, reference.devices());
    reference.forward_backward(whole.x, weighted_mse(whole));
  }
  for (const ReduceOp reduction : {ReduceOp::Sum, ReduceOp::Average}) {
    for (const DdpPath path : {DdpPath::ForwardThenBackward, DdpPath::ForwardBackward}) {
      SCOPED_TRACE(std::string(reduction == ReduceOp::Sum ? "sum, " : "average, ") +
                   (path == DdpPath::ForwardBackward ? "forward_backward" : "forward then backward"));
      DistributedDataParallel ddp(distributed_net(device()), group_, {.bucket_size = 128, .reduction = reduction});
      for (size_t micro = 0; micro < 2; ++micro) ddp_micro_batch(ddp, distributed_batch(micro), path);
      for (size_t r = 0; r < local(); ++r) {
        expect_gradients_close(*ddp.replicated().replicas()[r], gradients_of(*reference_net), 1e-5, atol());
      }
    }
  }
}

// With losses weighted by their share of the global batch, Sum gives the full-batch gradient and Average that
// divided by the number of processes.
TEST_P(DistributedTraining, AverageDividesTheSumByTheNumberOfProcesses) {
  const DistributedBatch b = distributed_batch(0);
  auto reference_net = distributed_net();
  parallel::ReplicatedModule reference(reference_net, virtual_devices(world()));
  const Shard whole = shard_of(b, world(), 0, reference.devices());
  reference.forward_backward(whole.x, weighted_mse(whole));
  for (const ReduceOp reduction : {ReduceOp::Sum, ReduceOp::Average}) {
    SCOPED_TRACE(reduction == ReduceOp::Sum ? "sum" : "average");
    DistributedDataParallel ddp(distributed_net(device()), group_, {.bucket_size = 128, .reduction = reduction});
    const Shard shard = shard_of(b, world(), first_device(), group_->devices());
    ddp.forward_backward(shard.x, weighted_mse(shard));
    const float divisor = reduction == ReduceOp::Sum ? 1.0f : static_cast<float>(group_->size());
    std::vector<Tensor> expected;
    for (const Tensor& gradient : gradients_of(*reference_net)) expected.push_back(gradient * (1.0f / divisor));
    for (size_t r = 0; r < local(); ++r) {
      expect_gradients_close(*ddp.replicated().replicas()[r], expected, 1e-5, atol());
    }
  }
}

// A batch of one row: rank 0's first device has it, every other device of the job has none and still takes part.
TEST_P(DistributedTraining, ARankWithoutRowsTakesPartInTheReduction) {
  DistributedBatch b = distributed_batch(0);
  b.x = b.x.narrow(0, 0, 1);
  b.y = b.y.narrow(0, 0, 1);
  auto reference_net = distributed_net();
  nn::mse_loss(reference_net->forward(b.x), b.y).backward();
  for (const DdpPath path : {DdpPath::ForwardThenBackward, DdpPath::ForwardBackward}) {
    SCOPED_TRACE(path == DdpPath::ForwardBackward ? "forward_backward" : "forward then backward");
    DistributedDataParallel ddp(distributed_net(device()), group_, {.bucket_size = 128, .reduction = ReduceOp::Sum});
    if (group_->rank() > 0) {
      EXPECT_TRUE(shard_of(b, world(), first_device(), group_->devices()).x.empty());
    }
    ddp_micro_batch(ddp, b, path);
    for (size_t r = 0; r < local(); ++r) {
      expect_gradients_close(*ddp.replicated().replicas()[r], gradients_of(*reference_net), 1e-5, atol());
    }
  }
}

// Construction broadcasts rank 0's parameters to every process and replica.
TEST_P(DistributedTraining, ConstructionGivesEveryProcessRankZerosParameters) {
  auto net = distributed_net(device());
  if (group_->rank() != 0) {
    NoGradGuard no_grad;
    for (Tensor parameter : net->parameters()) parameter.fill_(static_cast<float>(group_->rank()));
  }
  DistributedDataParallel ddp(net, group_);
  for (const auto& replica : ddp.replicated().replicas())
    expect_parameters_close(*replica, *distributed_net(), 0.0, 0.0);
}

// TwoLayerNet with one more parameter.
class WithExtraParameter : public TwoLayerNet {
 public:
  explicit WithExtraParameter(Device device) : TwoLayerNet(10, 20, 1, device), extra(Tensor::zeros({3}, device)) {
    register_parameter("extra", extra);
  }
  Tensor extra;
};

// Processes whose models differ: every rank throws, naming the first difference (the last rank's model differs).
TEST_P(DistributedTraining, ModelsThatDifferAreAnErrorOnEveryRank) {
  if (group_->size() == 1) GTEST_SKIP() << "needs two or more processes";
  const int last = group_->size() - 1;
  const bool odd_one = group_->rank() == last;
  EXPECT_ERROR(DistributedDataParallel(make_net(device(), 10, odd_one ? 21 : 20, 1), group_),
               "parallel::DistributedDataParallel: the processes' models differ: parameter 0 ('fc1.weight' here) has "
               "shape [20, 10] on rank 0 but [21, 10] on rank " +
                   std::to_string(last) + "; every process must build the same model");
  const std::shared_ptr<nn::Module> extra =
      odd_one ? std::shared_ptr<nn::Module>(std::make_shared<WithExtraParameter>(device())) : distributed_net(device());
  EXPECT_ERROR(DistributedDataParallel(extra, group_),
               "parallel::DistributedDataParallel: the processes' models "
               "differ: rank " +
                   std::to_string(last) + " has 5 parameters but rank 0 has 4");
  // The group is still usable: every rank made the same collectives.
  DistributedDataParallel ddp(distributed_net(device()), group_);
  EXPECT_EQ(ddp.group()->size(), group_->size());
}

TANDEM_INSTANTIATE_ON_GROUP_DEVICES(LocalDevices, DistributedTraining);

}  // namespace
}  // namespace tandem::testing
