// The Trainer reads its steps' losses once per epoch (Note [Losses read once per epoch] in callback.h): callbacks
// that need every step's loss still get it, the others can read it on demand, and neither way changes the training
// or the message of a non-finite loss.

#include <cmath>
#include <memory>
#include <vector>

#include "support/test_support.h"

namespace tandem::trainers {
namespace {

using testing::diabetes;

Trainer seed_net_trainer(int64_t epochs, double lr = 0.01) {
  manual_seed(0);
  TrainerOptions options;
  options.devices = {Device::cpu(0), Device::cpu(1)};
  options.epochs = epochs;
  options.sgd.lr = lr;
  return Trainer(make_mlp(10, 20), options);
}

// Records each step's loss, from StepReport::loss when it asks for it, else through read_loss.
struct StepLosses : Callback {
  explicit StepLosses(bool needs) : needs(needs) {}
  bool needs_step_loss() const override { return needs; }
  void on_step_end(const Trainer&, const StepReport& report) override {
    EXPECT_EQ(std::isnan(report.loss), !needs) << report.step;
    ASSERT_TRUE(report.read_loss);
    const std::optional<double> read = report.read_loss();
    ASSERT_TRUE(read.has_value());
    if (needs) EXPECT_EQ(*read, report.loss);
    losses.push_back(*read);
  }
  void on_epoch_end(const Trainer&, const EpochReport& report) override { train_losses.push_back(report.train_loss); }

  bool needs;
  std::vector<double> losses;
  std::vector<double> train_losses;
};

std::vector<std::vector<float>> parameter_values(const Trainer& trainer) {
  std::vector<std::vector<float>> values;
  for (const Tensor& p : trainer.model()->parameters()) values.push_back(p.to_vector());
  return values;
}

TEST(StepLosses, ReadAfterEveryStepOrOnDemandTheyAreTheSame) {
  Trainer each_step = seed_net_trainer(2);
  Trainer on_demand = seed_net_trainer(2);
  auto every = std::make_shared<StepLosses>(/*needs=*/true);
  auto lazy = std::make_shared<StepLosses>(/*needs=*/false);
  each_step.add_callback(every);
  on_demand.add_callback(lazy);
  each_step.fit(diabetes().train);
  on_demand.fit(diabetes().train);
  ASSERT_EQ(every->losses.size(), 12u);  // 354 rows in batches of 64: 6 steps per epoch
  EXPECT_EQ(lazy->losses, every->losses);
  EXPECT_EQ(lazy->train_losses, every->train_losses);
  EXPECT_EQ(parameter_values(on_demand), parameter_values(each_step));

  // An epoch's train_loss is its steps' losses weighted by their rows (five batches of 64, one of 34), exactly as the
  // Trainer adds them up.
  for (size_t epoch = 0; epoch < 2; ++epoch) {
    double sum = 0.0;
    for (size_t b = 0; b < 6; ++b) sum += every->losses[epoch * 6 + b] * (b < 5 ? 64.0 : 34.0);
    EXPECT_EQ(every->train_losses[epoch], sum / 354.0);
  }
}

TEST(StepLosses, ANonFiniteLossNamesTheSameStepEitherWay) {
  // A learning rate of 1e10 overflows within a few steps of the first epoch.
  Trainer each_step = seed_net_trainer(3, /*lr=*/1e10);
  Trainer at_epoch_end = seed_net_trainer(3, /*lr=*/1e10);
  each_step.add_callback(std::make_shared<StepLosses>(/*needs=*/true));
  auto epochs_seen = std::make_shared<StepLosses>(/*needs=*/false);
  at_epoch_end.add_callback(epochs_seen);
  const std::string first = testing::error_message_of([&] { each_step.fit(diabetes().train); });
  const std::string second = testing::error_message_of([&] { at_epoch_end.fit(diabetes().train); });
  EXPECT_NE(first.find("Trainer::fit: the loss is "), std::string::npos) << first;
  EXPECT_NE(first.find(" at epoch 1, step "), std::string::npos) << first;
  EXPECT_EQ(testing::without_error_location(second), testing::without_error_location(first));
  EXPECT_TRUE(epochs_seen->train_losses.empty());  // no callback saw the bad epoch's end
  EXPECT_EQ(at_epoch_end.step(), 6);               // checked at the epoch's end: its later steps ran
}

}  // namespace
}  // namespace tandem::trainers
