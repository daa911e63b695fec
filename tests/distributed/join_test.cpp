// parallel::Join across the processes of a job: every rank iterates a DataLoader over data of its own (drop_last
// false: a short last batch), so rank r holds 7 - 2r batches (7 and 5 in two processes, 7, 5 and 3 in three). The
// epoch must end on every rank in the same step, with bitwise the same parameters everywhere, and equal to one net on
// one device trained on each step's concatenation of the ranks' batches (which every rank computes itself). Run
// alone, the group has one process and rank 0's epoch is the reference's.
#include "tandem/parallel/join.h"

#include <cstring>
#include <string>

#include "distributed/group_devices.h"
#include "parallel/distributed_test_helpers.h"
#include "tandem/trainers/loader.h"
#include "tandem/trainers/tensor_dataset.h"

namespace tandem::testing {
namespace {

using comm::ReduceOp;
using parallel::DistributedDataParallel;
using parallel::Join;
using trainers::DataLoader;
using trainers::TensorDataset;

constexpr optim::AdamWOptions kJoinAdamW{.lr = 0.01, .weight_decay = 0.01};
constexpr int64_t kJoinBatchSize = 4;

// Rank r's own data: 26 - 8r rows, so 7 - 2r batches of 4 rows, the last of 2.
TensorDataset rank_data(int rank) {
  const int64_t rows = 26 - 8 * rank;
  return TensorDataset(
      {seeded_randn({rows, 10}, Device::cpu(0), 300 + rank), seeded_randn({rows, 1}, Device::cpu(0), 400 + rank)});
}

DataLoader rank_loader(const TensorDataset& data, int rank) {
  return DataLoader(data, {.batch_size = kJoinBatchSize, .shuffle = true, .seed = 20u + rank});
}

// The parameters' bytes, to compare ranks bit for bit.
std::string parameter_bytes(const nn::Module& module) {
  std::string bytes;
  for (const Tensor& parameter : module.parameters()) {
    const Tensor host = parameter.to(Device::cpu(0)).contiguous();
    bytes.append(static_cast<const char*>(host.data_ptr()), static_cast<size_t>(host.numel()) * sizeof(float));
  }
  return bytes;
}

class JoinOverUnevenInputs : public OnGroupDevices {
 protected:
  Device device() const { return group_->devices()[0]; }

  // One net trained by AdamW on the concatenation of every rank's k-th batch, for every step k of the longest epoch.
  std::shared_ptr<TwoLayerNet> reference() const {
    std::vector<TensorDataset> data;
    for (int r = 0; r < group_->size(); ++r) data.push_back(rank_data(r));
    std::vector<DataLoader> loaders;
    for (int r = 0; r < group_->size(); ++r) loaders.push_back(rank_loader(data[r], r));
    for (DataLoader& loader : loaders) loader.begin_epoch();
    auto net = distributed_net();
    optim::AdamW adamw(net->parameters(), kJoinAdamW);
    for (int64_t step = 0; step < loaders.front().num_batches(); ++step) {
      std::vector<Tensor> xs, ys;
      for (const DataLoader& loader : loaders) {
        if (step >= loader.num_batches()) continue;
        const trainers::Batch batch = loader.batch(step);
        xs.push_back(batch.features);
        ys.push_back(batch.targets);
      }
      adamw.zero_grad();
      nn::mse_loss((*net)(cat(xs, 0)), cat(ys, 0)).backward();
      adamw.step();
    }
    return net;
  }

  void expect_same_parameters_on_every_rank(const nn::Module& module) const {
    const std::vector<std::string> all = group_->exchange_text(parameter_bytes(module), "join test parameters");
    for (size_t r = 1; r < all.size(); ++r) EXPECT_TRUE(all[r] == all[0]) << "rank " << r << " differs from rank 0";
  }
};

// PyTorch users' loop: out = ddp(x); (loss * join.loss_weight()).backward(); optimizer.step(), a plain AdamW over an
// averaging DistributedDataParallel, shadow() once a rank's batches have run out.
TEST_P(JoinOverUnevenInputs, AnEpochOfUnevenBatchesEndsWithTheParametersOfTheConcatenatedBatches) {
  const TensorDataset data = rank_data(group_->rank());
  DataLoader loader = rank_loader(data, group_->rank());
  auto ddp = std::make_shared<DistributedDataParallel>(distributed_net(device()), group_);
  optim::AdamW adamw(ddp->parameters(), kJoinAdamW);
  Join join(*ddp);
  int64_t trained = 0, shadowed = 0;
  auto batch = loader.begin();
  while (join.next(batch != loader.end() ? batch->rows() : 0)) {
    adamw.zero_grad();
    if (join.joined()) {
      join.shadow();
      ++shadowed;
    } else {
      const Tensor loss = nn::mse_loss((*ddp)(batch->features), batch->targets.to(device())) * join.loss_weight();
      loss.backward();
      ++batch;
      ++trained;
    }
    adamw.step();
  }
  EXPECT_EQ(trained, 7 - 2 * group_->rank());
  EXPECT_EQ(shadowed, 2 * group_->rank());
  EXPECT_EQ(join.steps(), 7);
  expect_same_parameters_on_every_rank(*ddp->module());
  expect_parameters_close(*ddp->module(), *reference(), 1e-6, reference_atol(GetParam()));
}

// parallel::TrainingStep over a summing model: a joined rank steps on an empty batch, every rank with the step's
// global rows.
TEST_P(JoinOverUnevenInputs, TrainingStepsOnAnEmptyBatchOnceARanksBatchesRunOut) {
  const TensorDataset data = rank_data(group_->rank());
  DataLoader loader = rank_loader(data, group_->rank());
  DistributedDataParallel ddp(distributed_net(device()), group_, {.bucket_size = 128, .reduction = ReduceOp::Sum});
  parallel::ReplicatedAdamW adamw(ddp.replicated(), kJoinAdamW);
  parallel::TrainingStep step(ddp, adamw, nn::mse_loss);
  Join join(ddp);
  auto batch = loader.begin();
  while (join.next(batch != loader.end() ? batch->rows() : 0)) {
    if (join.joined()) {
      step.step({.global_rows = join.global_rows()});
      continue;
    }
    EXPECT_DOUBLE_EQ(join.loss_weight(), static_cast<double>(join.rows()) / static_cast<double>(join.global_rows()));
    step.step({.features = batch->features, .targets = batch->targets, .global_rows = join.global_rows()});
    ++batch;
  }
  expect_same_parameters_on_every_rank(*ddp.module());
  expect_parameters_close(*ddp.module(), *reference(), 1e-6, reference_atol(GetParam()));
}

// Over even inputs the weights are exactly 1: the same bits as the loop without a Join.
TEST_P(JoinOverUnevenInputs, EvenInputsGiveTheBitsOfTheLoopWithoutAJoin) {
  auto plain = std::make_shared<DistributedDataParallel>(distributed_net(device()), group_);
  auto joined = std::make_shared<DistributedDataParallel>(distributed_net(device()), group_);
  optim::AdamW plain_adamw(plain->parameters(), kJoinAdamW), joined_adamw(joined->parameters(), kJoinAdamW);
  Join join(*joined);
  for (uint64_t s = 0; s < 5; ++s) {
    const Tensor x = seeded_randn({6, 10}, Device::cpu(0), 40 + s + 10 * group_->rank());
    const Tensor y = seeded_randn({6, 1}, Device::cpu(0), 60 + s + 10 * group_->rank()).to(device());
    plain_adamw.zero_grad();
    nn::mse_loss((*plain)(x), y).backward();
    plain_adamw.step();
    ASSERT_TRUE(join.next(6));
    EXPECT_EQ(join.loss_weight(), 1.0);
    EXPECT_EQ(join.active_processes(), group_->size());
    joined_adamw.zero_grad();
    (nn::mse_loss((*joined)(x), y) * join.loss_weight()).backward();
    joined_adamw.step();
  }
  EXPECT_FALSE(join.next(0));
  EXPECT_TRUE(parameter_bytes(*plain->module()) == parameter_bytes(*joined->module()));
}

// Misuse is refused on the rank that makes it, without a collective (so no rank waits for another).
TEST_P(JoinOverUnevenInputs, MisuseIsAnErrorNamingTheCause) {
  auto ddp = std::make_shared<DistributedDataParallel>(distributed_net(device()), group_);
  Join join(*ddp);
  EXPECT_ERROR(join.next(-1), "parallel::Join::next: rows is -1 but expected >= 0");
  EXPECT_ERROR(join.loss_weight(), "parallel::Join::loss_weight: no step started; call next(rows) first");
  EXPECT_ERROR(join.shadow(), "parallel::Join::shadow: no step started; call next(rows) first");
  // Rank 0 has rows, the others have run out.
  const bool rank0 = group_->rank() == 0;
  ASSERT_TRUE(join.next(rank0 ? 3 : 0));
  EXPECT_EQ(join.global_rows(), 3);
  EXPECT_EQ(join.active_processes(), 1);
  if (rank0) {
    EXPECT_ERROR(join.shadow(), "parallel::Join::shadow: this process has 3 rows in this step; train on them instead");
    EXPECT_DOUBLE_EQ(join.loss_weight(), group_->size());
    const Tensor x = seeded_randn({3, 10}, Device::cpu(0), 5);
    (nn::mse_loss((*ddp)(x), Tensor::zeros({3, 1}, device())) * join.loss_weight()).backward();
  } else {
    EXPECT_ERROR(join.loss_weight(), "parallel::Join::loss_weight: this process has no rows in this step");
    {
      auto guard = ddp->no_sync();
      EXPECT_ERROR(join.shadow(), "parallel::Join::shadow: called inside no_sync()");
    }
    join.shadow();
  }
  EXPECT_FALSE(join.next(0));
  EXPECT_ERROR(join.next(1), "parallel::Join::next: every process has run out of batches");
}

TEST_P(JoinOverUnevenInputs, SynchronizedBatchNormsAreRefused) {
  if (group_->devices().size() != 1) GTEST_SKIP() << "synchronized batch norm takes one device per process";
  auto net = std::make_shared<nn::Sequential>();
  net->push_back(std::make_shared<nn::Linear>(10, 4, true, device()));
  net->push_back(std::make_shared<nn::BatchNorm1d>(4, 1e-5, 0.1, true, true, device()));
  parallel::convert_sync_batchnorm(net, group_);
  DistributedDataParallel ddp(net, group_);
  EXPECT_ERROR((void)Join(ddp), "parallel::Join: the model holds a BatchNorm1d that synchronizes its statistics");
}

TANDEM_INSTANTIATE_ON_GROUP_DEVICES(Distributed, JoinOverUnevenInputs);

}  // namespace
}  // namespace tandem::testing
