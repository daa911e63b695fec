// parallel::TrainingStep on batches already placed on the devices (a DataLoader's chunks, as the Trainer hands them
// over) against the same step on the whole batch, and its refusals of misplaced parts.

#include <memory>
#include <vector>

#include "support/test_support.h"

namespace tandem::trainers {
namespace {

const std::vector<Device> kDevices = {Device::cpu(0), Device::cpu(1), Device::cpu(2)};

// 10 rows of 3 features and a target that depends on them.
TensorDataset regression_rows() {
  manual_seed(11);
  const Tensor features = Tensor::randn({10, 3});
  return TensorDataset({features, sum(features, 1, /*keepdim=*/true) * 0.5f});
}

std::shared_ptr<nn::Module> fresh_model() {
  manual_seed(3);
  return make_mlp(3, 4);
}

std::vector<std::vector<float>> values_of(const std::shared_ptr<nn::Module>& model) {
  std::vector<std::vector<float>> values;
  for (const Tensor& parameter : model->parameters()) values.push_back(parameter.to_vector());
  return values;
}

// A loader's batch as TrainingStep's chunks: chunk i's features and targets, on device i.
parallel::TrainingBatch placed_batch(const Batch& batch) {
  return {.inputs = batch.inputs, .labels = batch.labels, .global_rows = batch.global_rows};
}

constexpr parallel::TrainingStepOptions kEager{.capture = false};

TEST(TrainingStepBatches, APlacedBatchStepsExactlyAsTheWholeBatch) {
  const TensorDataset rows = regression_rows();
  DataLoader host(rows, {.batch_size = 7, .shuffle = true, .seed = 1});
  DataLoader placed(rows, {.batch_size = 7, .shuffle = true, .seed = 1, .devices = kDevices});
  parallel::ReplicatedModule scattering(fresh_model(), kDevices);
  parallel::ReplicatedModule given(fresh_model(), kDevices);
  parallel::ReplicatedSGD scattering_sgd(scattering, {.lr = 0.1, .momentum = 0.9});
  parallel::ReplicatedSGD given_sgd(given, {.lr = 0.1, .momentum = 0.9});
  parallel::TrainingStep scattering_step(scattering, scattering_sgd, nn::mse_loss, kEager);
  parallel::TrainingStep given_step(given, given_sgd, nn::mse_loss, kEager);
  for (int epoch = 0; epoch < 2; ++epoch) {
    host.begin_epoch();
    placed.begin_epoch();
    for (int64_t b = 0; b < host.num_batches(); ++b) {
      const Batch whole = host.batch(b);
      const Tensor expected = scattering_step.step({.features = whole.features, .targets = whole.targets});
      const Tensor loss = given_step.step(placed_batch(placed.batch(b)));
      EXPECT_EQ(loss.item(), expected.item());
      EXPECT_EQ(loss.device(), Device::cpu(0));
    }
  }
  EXPECT_EQ(values_of(given.module()), values_of(scattering.module()));
}

TEST(TrainingStepBatches, APlacedShardStepsExactlyAsTheScatteredShard) {
  const TableDataset rows = [] {
    const TensorDataset data = regression_rows();
    const std::vector<float> x = data.tensors()[0].to_vector();
    const std::vector<float> y = data.tensors()[1].to_vector();
    return TableDataset{
        {"a", "b", "c"}, "y", std::vector<double>(x.begin(), x.end()), std::vector<double>(y.begin(), y.end())};
  }();
  const auto group = comm::ProcessGroup::single(kDevices);
  DataLoader host(rows, 4, /*shuffle=*/true, 5, DistributedSampler(*group));
  const TensorDataset tensors = regression_rows();
  DataLoader placed(
      tensors,
      {.batch_size = 4, .shuffle = true, .seed = 5, .devices = kDevices, .sampler = DistributedSampler(*group)});
  const parallel::DistributedOptions sums{.reduction = comm::ReduceOp::Sum};
  parallel::DistributedDataParallel scattering(fresh_model(), group, sums);
  parallel::DistributedDataParallel given(fresh_model(), group, sums);
  parallel::ReplicatedSGD scattering_sgd(scattering.replicated(), {.lr = 0.1});
  parallel::ReplicatedSGD given_sgd(given.replicated(), {.lr = 0.1});
  parallel::TrainingStep scattering_step(scattering, scattering_sgd, nn::mse_loss, kEager);
  parallel::TrainingStep given_step(given, given_sgd, nn::mse_loss, kEager);
  host.begin_epoch();
  placed.begin_epoch();
  for (int64_t b = 0; b < host.num_batches(); ++b) {
    const Batch shard = host.batch(b);
    const Tensor expected = scattering_step.step({.features = shard.features,
                                                  .targets = shard.targets,
                                                  .device_rows = shard.device_rows,
                                                  .global_rows = shard.global_rows});
    EXPECT_EQ(given_step.step(placed_batch(placed.batch(b))).item(), expected.item());
  }
  EXPECT_EQ(values_of(given.replicated().module()), values_of(scattering.replicated().module()));
}

TEST(TrainingStepBatches, MisplacedBatchesAreErrors) {
  parallel::ReplicatedModule model(fresh_model(), {Device::cpu(0), Device::cpu(1)});
  parallel::ReplicatedSGD sgd(model, {.lr = 0.1});
  parallel::TrainingStep step(model, sgd);
  const Tensor x = Tensor::zeros({2, 3});
  const Tensor y = Tensor::zeros({2, 1});
  const Batch batch{.inputs = {x}, .labels = {y}, .device_rows = {2}, .global_rows = 2};
  Batch wrong_device = batch;
  wrong_device.inputs = {x.to(Device::cpu(1))};
  wrong_device.labels = {y.to(Device::cpu(1))};
  EXPECT_ERROR(step.step(placed_batch(wrong_device)),
               "parallel::TrainingStep::step: features chunk 0 is on cpu:1 but expected the model's device cpu:0");
  Batch global = batch;
  global.global_rows = 1;
  EXPECT_ERROR(step.step(placed_batch(global)),
               "parallel::TrainingStep::step: global_rows is 1 but this process alone has 2 rows");
  const Batch too_many{.inputs = {x, x, x}, .labels = {y, y, y}, .device_rows = {2, 2, 2}, .global_rows = 6};
  EXPECT_ERROR(step.step(placed_batch(too_many)),
               "parallel::TrainingStep::step: got 3 chunks of features and 3 of targets but expected as many, up to "
               "the model's 2 devices");
  // A refused batch takes no step.
  EXPECT_EQ(values_of(model.module()), values_of(fresh_model()));
}

}  // namespace
}  // namespace tandem::trainers
