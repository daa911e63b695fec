// parallel::TrainingStep over DistributedDataParallel across the processes of a job (Note [Capturing across
// processes] in training_step.h): on GPUs every process captures and replays its step, and the results equal the
// eager steps and one process on every device of the job; on virtual CPU devices the steps run eagerly with the
// reason, and the same results hold. Run alone (no launcher) the group has one process and the same expectations
// hold.

#include <memory>
#include <string>
#include <vector>

#include "distributed/group_devices.h"
#include "parallel/distributed_test_helpers.h"

namespace tandem::testing {
namespace {

using comm::ReduceOp;
using parallel::DistributedDataParallel;
using parallel::TrainingStep;

class CapturedDistributedStep : public OnGroupDevices {
 protected:
  size_t local() const { return group_->devices().size(); }
  size_t world() const { return group_->world_devices(); }
  size_t first_device() const { return static_cast<size_t>(group_->rank()) * local(); }
};

// trainers::Trainer's way: each process steps on its shard of every global batch (its chunks with the global batch's
// rows, the losses weighted by their share of those, the gradients summed over the processes), over batches of changing
// sizes, some of which leave whole processes without rows; 20 SGD steps with momentum equal one process on every device
// of the job.
TEST_P(CapturedDistributedStep, ShardsOfGlobalBatchesEqualOneProcessOnEveryDevice) {
  const auto reference = train_reference(world());
  auto net = distributed_net(group_->devices()[0]);
  DistributedDataParallel ddp(net, group_, {.bucket_size = 128, .reduction = ReduceOp::Sum});
  parallel::ReplicatedSGD sgd(ddp.replicated(), kDistributedSgd);
  TrainingStep step(ddp, sgd, nn::mse_loss);
  size_t replayed = 0;
  for (size_t s = 0; s < kDistributedSteps; ++s) {
    const DistributedBatch b = distributed_batch(s);
    const Shard shard = shard_of(b, world(), first_device(), group_->devices());
    const Tensor loss = step.step({.inputs = shard.x, .labels = shard.y, .global_rows = b.x.size(0)});
    EXPECT_EQ(loss.device(), group_->devices()[0]);
    if (step.captured()) ++replayed;
    if (GetParam() != GroupDevices::CUDA) {
      EXPECT_NE(step.fallback_reason().find("capture needs CUDA devices"), std::string::npos) << step.fallback_reason();
    }
  }
  if (GetParam() == GroupDevices::CUDA) EXPECT_GT(replayed, 0u);
  expect_parameters_close(*net, *reference, 1e-5, reference_atol(GetParam()));
}

// A shard without chunks is a process without rows, which only a model reduced across processes may have.
TEST_P(CapturedDistributedStep, NoChunksNeedAModelReducedAcrossProcesses) {
  auto net = distributed_net(group_->devices()[0]);
  parallel::ReplicatedModule alone(net, group_->devices());
  parallel::ReplicatedSGD sgd(alone, kDistributedSgd);
  TrainingStep step(alone, sgd, nn::mse_loss);
  EXPECT_ERROR(step.step({.global_rows = 4}), "a model that is not reduced across processes needs at least one");
  const Tensor x = Tensor::ones({2, 10}, group_->devices()[0]);
  const Tensor y = Tensor::ones({2, 1}, group_->devices()[0]);
  EXPECT_ERROR(step.step({.inputs = {x}, .labels = {y}, .global_rows = 1}),
               "parallel::TrainingStep::step: global_rows is 1 but this process alone has 2 rows");
}

// The chunks' losses carry their share of the global batch, so the processes' gradients must be summed, not averaged.
TEST_P(CapturedDistributedStep, AnAveragingModelIsAnError) {
  auto net = distributed_net(group_->devices()[0]);
  DistributedDataParallel ddp(net, group_, {.bucket_size = 128, .reduction = ReduceOp::Average});
  parallel::ReplicatedSGD sgd(ddp.replicated(), kDistributedSgd);
  EXPECT_ERROR((void)TrainingStep(ddp, sgd, nn::mse_loss),
               "parallel::TrainingStep: the DistributedDataParallel averages its gradients but expected ReduceOp::Sum");
}

TANDEM_INSTANTIATE_ON_GROUP_DEVICES(Distributed, CapturedDistributedStep);

// The brief's seed net on GPUs: one process per GPU under a launcher (two GPUs in one process alone), DDP summing over
// the processes, each process stepping on its equal shard of every batch (weighted by its share of the whole batch);
// the same steps eager from the same start, and one process on the whole batch over every device of the job.
class CapturedDistributedSeedNet : public CapturedDistributedStep {};

TEST_P(CapturedDistributedSeedNet, ReplaysEqualTheEagerStepsAndOneProcessOnTheWholeBatch) {
  constexpr size_t kSteps = 6;
  constexpr int kWarmup = 2;
  const int64_t rows = 8 * static_cast<int64_t>(world());
  manual_seed(11);
  const std::shared_ptr<nn::Module> start = trainers::make_mlp(10, 20);
  const auto copy = [&](Device device) { return start->clone(device); };
  const optim::SGDOptions sgd_options{.lr = 0.05, .momentum = 0.9};

  const std::shared_ptr<nn::Module> captured_net = copy(group_->devices()[0]);
  DistributedDataParallel captured_ddp(captured_net, group_, {.bucket_size = 256, .reduction = ReduceOp::Sum});
  parallel::ReplicatedSGD captured_sgd(captured_ddp.replicated(), sgd_options);
  TrainingStep captured(captured_ddp, captured_sgd, nn::mse_loss, {.warmup_steps = kWarmup});

  const std::shared_ptr<nn::Module> eager_net = copy(group_->devices()[0]);
  DistributedDataParallel eager_ddp(eager_net, group_, {.bucket_size = 256, .reduction = ReduceOp::Sum});
  parallel::ReplicatedSGD eager_sgd(eager_ddp.replicated(), sgd_options);
  TrainingStep eager(eager_ddp, eager_sgd, nn::mse_loss, {.capture = false});

  const std::shared_ptr<nn::Module> reference_net = copy(Device::cpu(0));
  parallel::ReplicatedModule reference(reference_net, virtual_devices(world()));
  parallel::ReplicatedSGD reference_sgd(reference, sgd_options);
  TrainingStep reference_step(reference, reference_sgd, nn::mse_loss, {.capture = false});

  for (size_t s = 0; s < kSteps; ++s) {
    SCOPED_TRACE("step " + std::to_string(s));
    const DistributedBatch b{seeded_randn({rows, 10}, Device::cpu(0), 900 + s),
                             seeded_randn({rows, 1}, Device::cpu(0), 950 + s)};
    const Shard shard = shard_of(b, world(), first_device(), group_->devices());
    const parallel::TrainingBatch batch{.inputs = shard.x, .labels = shard.y, .global_rows = rows};
    const Tensor captured_loss = captured.step(batch);
    EXPECT_EQ(captured.captured(), s >= static_cast<size_t>(kWarmup));
    if (s >= static_cast<size_t>(kWarmup)) EXPECT_EQ(captured.fallback_reason(), "");
    const Tensor eager_loss = eager.step(batch);
    EXPECT_FALSE(eager.captured());
    const Tensor reference_loss = reference_step.step({.features = b.x, .targets = b.y});

    expect_close(captured_loss, eager_loss, 1e-6, 1e-7);
    // The job's loss is the sum of the processes' parts: gathered from every device of the job, where each process's
    // part appears once per device of the process.
    std::vector<Tensor> mine;
    for (const Device& device : group_->devices()) mine.push_back(captured_loss.reshape({1}).to(device));
    const Tensor all = group_->all_gather(mine)[0];
    expect_close(sum(all) / static_cast<float>(local()), reference_loss, 1e-5, 1e-6);
  }
  expect_parameters_close(*captured_net, *eager_net, 1e-6, 1e-7);
  expect_parameters_close(*captured_net, *reference_net, 1e-5, reference_atol(GroupDevices::CUDA));
}

INSTANTIATE_TEST_SUITE_P(Distributed, CapturedDistributedSeedNet, ::testing::Values(GroupDevices::CUDA),
                         [](const ::testing::TestParamInfo<GroupDevices>& info) { return name_of(info.param); });

}  // namespace
}  // namespace tandem::testing
