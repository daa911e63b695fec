// Trainer::fit's set-up before its clock and its one read per epoch (Note [Set-up before the clock], Note [Warming
// the step up on a copy] in trainers/src/trainer.cpp, Note [One read per epoch] in trainer_evaluation.cpp): the warm-up
// on a throwaway copy leaves every result as it is without it, the epoch reports' metrics are those evaluate() gives,
// and the set-up time is reported.

#include <memory>
#include <vector>

#include "support/test_support.h"

namespace tandem::trainers {
namespace {

using testing::diabetes;

// Records every epoch's report.
struct Reports : Callback {
  void on_epoch_end(const Trainer&, const EpochReport& report) override { epochs.push_back(report); }
  std::vector<EpochReport> epochs;
};

struct WarmUpRun {
  FitResult result;
  std::vector<EpochReport> epochs;
  std::vector<std::vector<float>> parameters;
  GeneratorState generator;  // after the fit
};

// Fits `make()`'s model (made after seeding with 0) on diabetes with `options`, and keeps what a run changes.
template <typename Make>
WarmUpRun fit_seeded(const Make& make, const TrainerOptions& options) {
  manual_seed(0);
  Trainer trainer(make(), options);
  auto reports = std::make_shared<Reports>();
  trainer.add_callback(reports);
  WarmUpRun run{.result = trainer.fit(diabetes().train, diabetes().test)};
  run.epochs = reports->epochs;
  for (const Tensor& parameter : trainer.model()->parameters()) run.parameters.push_back(parameter.to_vector());
  run.generator = generator_state();
  return run;
}

// A ReLU net with Dropout (whose forward draws from the global generator in training mode), seeded with 0.
WarmUpRun fit_dropout_net(const std::vector<Device>& devices, bool warm_up, int64_t epochs) {
  return fit_seeded(
      [] {
        return make_mlp(10, {16, 8}, 1, Activation::ReLU, 0.2);
      },
      {.devices = devices, .epochs = epochs, .warm_up = warm_up});
}

void expect_identical(const WarmUpRun& with, const WarmUpRun& without) {
  EXPECT_EQ(with.parameters, without.parameters);
  EXPECT_EQ(with.generator, without.generator);
  EXPECT_EQ(with.result.train.mse, without.result.train.mse);
  ASSERT_TRUE(with.result.test && without.result.test);
  EXPECT_EQ(with.result.test->mse, without.result.test->mse);
  EXPECT_EQ(with.result.steps, without.result.steps);
  EXPECT_EQ(with.result.captured_steps, without.result.captured_steps);
  EXPECT_EQ(with.result.eager_reason, without.result.eager_reason);
  ASSERT_EQ(with.epochs.size(), without.epochs.size());
  for (size_t e = 0; e < with.epochs.size(); ++e) {
    EXPECT_EQ(with.epochs[e].train_loss, without.epochs[e].train_loss) << "epoch " << e + 1;
    ASSERT_TRUE(with.epochs[e].test && without.epochs[e].test);
    EXPECT_EQ(with.epochs[e].test->mse, without.epochs[e].test->mse) << "epoch " << e + 1;
  }
}

TEST(TrainerSetup, WarmUpIsOnByDefault) { EXPECT_TRUE(TrainerOptions{}.warm_up); }

// The warm-up takes steps with Dropout on a copy of the model: only the restored generator keeps the fit's masks,
// and so its results, those of a fit without it.
TEST(TrainerSetup, WarmUpLeavesEveryResultAsItIsWithoutIt) {
  for (const std::vector<Device>& devices :
       {std::vector<Device>{Device::cpu(0)}, std::vector<Device>{Device::cpu(0), Device::cpu(1), Device::cpu(2)}}) {
    SCOPED_TRACE(to_string(devices));
    const WarmUpRun with = fit_dropout_net(devices, true, 4);
    const WarmUpRun without = fit_dropout_net(devices, false, 4);
    ASSERT_EQ(with.epochs.size(), 4u);
    expect_identical(with, without);
  }
}

TEST(TrainerSetup, SetupSecondsAreReportedBesideSeconds) {
  const WarmUpRun run = fit_dropout_net({Device::cpu(0), Device::cpu(1)}, true, 2);
  EXPECT_GT(run.result.setup_seconds, 0.0);
  EXPECT_GT(run.result.seconds, 0.0);
}

// Every epoch's metrics come from its one read (Note [One read per epoch]): they equal what evaluate() and
// evaluate_classes() read separately at that point, exactly.
struct CheckedAgainstEvaluate : Callback {
  CheckedAgainstEvaluate(const TableDataset& train, const TableDataset& test) : train(train), test(test) {}
  void on_epoch_end(const Trainer& trainer, const EpochReport& report) override {
    ++epochs;
    if (trainer.options().task == Task::Regression) {
      ASSERT_TRUE(report.test.has_value());
      const RegressionMetrics expected = trainer.evaluate(test);
      EXPECT_EQ(report.test->mse, expected.mse) << "epoch " << report.epoch;
      EXPECT_EQ(report.test->r2, expected.r2) << "epoch " << report.epoch;
      EXPECT_EQ(report.test->rows, expected.rows);
      return;
    }
    ASSERT_TRUE(report.train_classes && report.test_classes);
    const ClassificationMetrics train_expected = trainer.evaluate_classes(train);
    const ClassificationMetrics test_expected = trainer.evaluate_classes(test);
    EXPECT_EQ(report.train_classes->cross_entropy, train_expected.cross_entropy) << "epoch " << report.epoch;
    EXPECT_EQ(report.train_classes->confusion, train_expected.confusion) << "epoch " << report.epoch;
    EXPECT_EQ(report.test_classes->cross_entropy, test_expected.cross_entropy) << "epoch " << report.epoch;
    EXPECT_EQ(report.test_classes->accuracy, test_expected.accuracy) << "epoch " << report.epoch;
  }
  const TableDataset& train;
  const TableDataset& test;
  int epochs = 0;
};

TEST(TrainerSetup, EpochMetricsEqualEvaluateAtThatEpoch) {
  manual_seed(0);
  Trainer trainer(make_mlp(10, 20), {.devices = {Device::cpu(0), Device::cpu(1)}, .epochs = 3});
  auto check = std::make_shared<CheckedAgainstEvaluate>(diabetes().train, diabetes().test);
  trainer.add_callback(check);
  const FitResult result = trainer.fit(diabetes().train, diabetes().test);
  EXPECT_EQ(check->epochs, 3);
  EXPECT_EQ(result.train.mse, trainer.evaluate(diabetes().train).mse);
  EXPECT_EQ(result.test->mse, trainer.evaluate(diabetes().test).mse);
}

TEST(TrainerSetup, ClassifierEpochMetricsEqualEvaluateClassesAtThatEpoch) {
  // Three classes, labelled 5, -1 and 9, cut from the diabetes rows' bmi.
  TableDataset data = make_dataset(parse_csv(datasets::diabetes_csv()), "target");
  for (int64_t row = 0; row < data.rows(); ++row) {
    const double bmi = data.feature(row, 2);
    data.targets[static_cast<size_t>(row)] = bmi < 24 ? 5 : bmi < 29 ? -1 : 9;
  }
  const Split split = train_test_split(data, 0.2);
  TrainerOptions options{.devices = {Device::cpu(0), Device::cpu(1)}, .epochs = 3, .task = Task::Classification};
  options.classes = ClassLabels::of(data);
  manual_seed(0);
  Trainer trainer(make_mlp(10, {16}, 3, Activation::ReLU), options);
  auto check = std::make_shared<CheckedAgainstEvaluate>(split.train, split.test);
  trainer.add_callback(check);
  const FitResult result = trainer.fit(split.train, split.test);
  EXPECT_EQ(check->epochs, 3);
  EXPECT_EQ(result.train_classes->confusion, trainer.evaluate_classes(split.train).confusion);
  EXPECT_EQ(result.test_classes->cross_entropy, trainer.evaluate_classes(split.test).cross_entropy);
  EXPECT_EQ(result.test_classes->rows, split.test.rows());
}

// ---- CUDA ------------------------------------------------------------------------------------------------------

// On GPUs the warm-up loads the step's kernels, captures and replays throwaway graphs and grows the allocator; the
// fit's own steps, captured after it, compute the same values: the same kernels on the same data in the same order.
TEST(TrainerSetup, WarmUpLeavesEveryResultAsItIsWithoutIt_MultiCUDA) {
  TANDEM_REQUIRE_GPUS(2);
  const std::vector<Device> gpus = {Device::cuda(0), Device::cuda(1)};
  const auto fit_on_gpus = [&](bool warm_up) {
    return fit_seeded([] { return make_mlp(10, 20); }, {.devices = gpus, .epochs = 5, .warm_up = warm_up});
  };
  const WarmUpRun with = fit_on_gpus(true);
  const WarmUpRun without = fit_on_gpus(false);
  EXPECT_TRUE(with.result.steps_captured()) << with.result.eager_reason;
  EXPECT_EQ(with.result.captured_steps, 30 - 2);
  expect_identical(with, without);
  EXPECT_GT(with.result.setup_seconds, 0.0);
}

}  // namespace
}  // namespace tandem::trainers
