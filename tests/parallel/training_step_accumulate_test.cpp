// TrainingStep::accumulate: micro-batches whose gradients add up locally, reduced, clipped and stepped once by the
// step() that follows, against one plain step per whole batch on one device (Note [Accumulating micro-batches]).

#include <memory>

#include "parallel/parallel_test_helpers.h"
#include "tandem/parallel/training_step.h"

namespace tandem::testing {
namespace {

constexpr double kAccumulatedMaxNorm = 0.05;  // far below the net's gradient norms, so every step clips

std::vector<std::pair<Tensor, Tensor>> whole_batches(int steps) {
  std::vector<std::pair<Tensor, Tensor>> out;
  for (int s = 0; s < steps; ++s) {
    out.emplace_back(seeded_randn({12, 4}, Device::cpu(0), 30 + s), seeded_randn({12, 2}, Device::cpu(0), 70 + s));
  }
  return out;
}

// One device, one step per whole batch: forward, backward, clip_grad_norm_ (when clipping), AdamW's step.
std::shared_ptr<TwoLayerNet> whole_batch_reference(const std::vector<std::pair<Tensor, Tensor>>& batches, bool clip) {
  auto net = make_net(Device::cpu(0));
  optim::AdamW adamw(net->parameters(), {.lr = 0.01, .weight_decay = 0.05});
  for (const auto& batch : batches) {
    net->zero_grad();
    nn::mse_loss(net->forward(batch.first), batch.second).backward();
    if (clip) nn::utils::clip_grad_norm_(net->parameters(), kAccumulatedMaxNorm);
    adamw.step();
  }
  return net;
}

// Each batch of 12 rows as micro-batches of 5, 4 and 3 rows (uneven, so weighting each by 1/3 would differ), the
// first two accumulated, on two devices.
void expect_accumulation_equals_whole_batches(bool clip) {
  const auto data = whole_batches(3);
  const auto expected = whole_batch_reference(data, clip);
  auto net = make_net(Device::cpu(0));
  parallel::ReplicatedModule model(net, {Device::cpu(0), Device::cpu(1)});
  parallel::ReplicatedAdamW adamw(model, {.lr = 0.01, .weight_decay = 0.05});
  parallel::TrainingStep step(model, adamw, nn::mse_loss,
                              {.max_grad_norm = clip ? std::optional<double>(kAccumulatedMaxNorm) : std::nullopt});
  for (const auto& batch : data) {
    const auto part = [&batch](int64_t start, int64_t rows) {
      return parallel::TrainingBatch{.features = batch.first.narrow(0, start, rows),
                                     .targets = batch.second.narrow(0, start, rows),
                                     .global_rows = 12};
    };
    (void)step.accumulate(part(0, 5));
    (void)step.accumulate(part(5, 4));
    EXPECT_TRUE(step.accumulating());
    EXPECT_EQ(step.strategy(), parallel::StepStrategy::Eager);
    (void)step.step(part(9, 3));
    EXPECT_FALSE(step.accumulating());
    EXPECT_NE(step.fallback_reason().find("accumulate()"), std::string::npos) << step.fallback_reason();
  }
  expect_parameters_close(*net, *expected, 1e-5, 1e-6);
}

TEST(TrainingStepAccumulation, MicroBatchesWeightedByRowsEqualOneStepOnTheWholeBatch) {
  expect_accumulation_equals_whole_batches(/*clip=*/false);
}

TEST(TrainingStepAccumulation, TheAccumulatedGradientIsClippedOnce) {
  expect_accumulation_equals_whole_batches(/*clip=*/true);
}

TEST(TrainingStepAccumulation, TheSharesOfTheLossAddUpToTheWholeBatchsMeanLoss) {
  const auto data = whole_batches(1);
  auto net = make_net(Device::cpu(0));
  const float whole = nn::mse_loss(net->forward(data[0].first), data[0].second).item();
  parallel::ReplicatedModule model(net, {Device::cpu(0), Device::cpu(1)});
  parallel::ReplicatedSGD sgd(model, {.lr = 0.1});
  parallel::TrainingStep step(model, sgd);
  const Tensor first = step.accumulate(
      {.features = data[0].first.narrow(0, 0, 7), .targets = data[0].second.narrow(0, 0, 7), .global_rows = 12});
  const Tensor second = step.step(
      {.features = data[0].first.narrow(0, 7, 5), .targets = data[0].second.narrow(0, 7, 5), .global_rows = 12});
  EXPECT_NEAR(first.item() + second.item(), whole, 1e-6 * whole);
}

}  // namespace
}  // namespace tandem::testing
