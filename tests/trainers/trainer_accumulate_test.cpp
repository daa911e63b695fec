// Gradient accumulation (TrainerOptions::accumulate_steps): K batches of B rows per optimizer step train as one batch
// of K * B rows, the uneven last batches weighted by their rows, on one device and over two.
#include <filesystem>

#include "support/test_support.h"

namespace tandem::trainers {
namespace {

// y = x0 - 2 x1 + 0.5 x2 (plus a wobble) on `rows` rows.
TableDataset accumulation_data(int64_t rows) {
  TableDataset data;
  data.feature_names = {"x0", "x1", "x2"};
  data.target_name = "y";
  for (int64_t i = 0; i < rows; ++i) {
    const double x0 = static_cast<double>(i % 5) - 2.0;
    const double x1 = static_cast<double>(i % 3) * 0.5;
    const double x2 = static_cast<double>(i % 7) * 0.25;
    data.features.insert(data.features.end(), {x0, x1, x2});
    data.targets.push_back(x0 - 2.0 * x1 + 0.5 * x2 + 0.1 * static_cast<double>(i % 4));
  }
  return data;
}

// Every epoch's training loss.
class EpochLossLog : public Callback {
 public:
  void on_epoch_end(const Trainer& /*trainer*/, const EpochReport& report) override {
    losses.push_back(report.train_loss);
  }
  std::vector<double> losses;
};

struct AccumulationRun {
  std::vector<Tensor> parameters;
  std::vector<double> losses;
  FitResult result;
};

Trainer accumulating_trainer(int64_t batch_size, int64_t accumulate_steps, const std::vector<Device>& devices,
                             int64_t epochs = 3) {
  manual_seed(0);
  TrainerOptions options;
  options.devices = devices;
  options.epochs = epochs;
  options.batch_size = batch_size;
  options.accumulate_steps = accumulate_steps;
  options.sgd = {.lr = 0.05, .momentum = 0.9};
  options.resume_may_change = {"epochs"};
  return Trainer(make_mlp(3, 8, Activation::ReLU), options);
}

std::vector<Tensor> parameters_on_host(const Trainer& trainer) {
  std::vector<Tensor> parameters;
  for (const Tensor& parameter : trainer.model()->parameters()) parameters.push_back(parameter.to(Device::cpu()));
  return parameters;
}

AccumulationRun fit_accumulating(int64_t batch_size, int64_t accumulate_steps, const std::vector<Device>& devices,
                                 int64_t rows) {
  Trainer trainer = accumulating_trainer(batch_size, accumulate_steps, devices);
  auto log = std::make_shared<EpochLossLog>();
  trainer.add_callback(log);
  AccumulationRun run;
  run.result = trainer.fit(accumulation_data(rows));
  run.parameters = parameters_on_host(trainer);
  run.losses = log->losses;
  return run;
}

void expect_same_accumulated_training(const AccumulationRun& accumulated, const AccumulationRun& large) {
  EXPECT_EQ(accumulated.result.steps, large.result.steps);
  ASSERT_EQ(accumulated.parameters.size(), large.parameters.size());
  for (size_t i = 0; i < large.parameters.size(); ++i) {
    testing::expect_near_relative(accumulated.parameters[i], large.parameters[i], 1e-6,
                                  "parameter " + std::to_string(i));
  }
  ASSERT_EQ(accumulated.losses.size(), large.losses.size());
  for (size_t e = 0; e < large.losses.size(); ++e) {
    EXPECT_NEAR(accumulated.losses[e], large.losses[e], 1e-6 * std::abs(large.losses[e])) << "epoch " << e + 1;
  }
}

struct AccumulationCase {
  int64_t batch_size;  // of a micro-batch
  int64_t accumulate_steps;
  int64_t rows;
};

class TrainerAccumulation : public ::testing::TestWithParam<std::vector<Device>> {};

TEST_P(TrainerAccumulation, KBatchesPerStepEqualOneBatchKTimesLarger) {
  // 22 rows: micro-batches of 3 twice per step are steps of 6, 6, 6 and 3 + 1 rows (the 1-row batch weighted by its
  // rows); of 2 three times per step, steps of 6, 6, 6, 2 + 2; of 4 twice, 8, 8, 4 + 2; of 3 three times, 9, 9 and
  // 3 + 1 (an epoch of 8 batches, not a multiple of 3, steps on the remainder).
  for (const AccumulationCase& c : {AccumulationCase{3, 2, 22}, AccumulationCase{2, 3, 22}, AccumulationCase{4, 2, 22},
                                    AccumulationCase{3, 3, 22}}) {
    SCOPED_TRACE("batch " + std::to_string(c.batch_size) + ", accumulate " + std::to_string(c.accumulate_steps));
    const AccumulationRun accumulated = fit_accumulating(c.batch_size, c.accumulate_steps, GetParam(), c.rows);
    const AccumulationRun large = fit_accumulating(c.batch_size * c.accumulate_steps, 1, GetParam(), c.rows);
    EXPECT_EQ(accumulated.result.steps,
              3 * ((c.rows + c.batch_size * c.accumulate_steps - 1) / (c.batch_size * c.accumulate_steps)));
    expect_same_accumulated_training(accumulated, large);
  }
}

TEST_P(TrainerAccumulation, AnUnevenMicroBatchCountsByItsRowsNotAsAWholeBatch) {
  // Weighting each micro-batch's mean loss equally (1/K) would train differently from the large batch when the last
  // micro-batch is short: 3 + 1 rows here.
  const AccumulationRun accumulated = fit_accumulating(3, 2, GetParam(), 10);
  const AccumulationRun large = fit_accumulating(6, 1, GetParam(), 10);
  expect_same_accumulated_training(accumulated, large);
  const AccumulationRun other = fit_accumulating(3, 1, GetParam(), 10);  // a different run: the comparison can fail
  EXPECT_GT(testing::scaled_deviation(other.parameters.front(), large.parameters.front()), 1e-4);
}

TEST_P(TrainerAccumulation, AResumedFitContinuesAsTheUninterruptedOne) {
  // Steps never span epochs, so a checkpoint (written at an epoch's end) holds no accumulated gradients.
  Trainer uninterrupted = accumulating_trainer(3, 3, GetParam(), 4);
  uninterrupted.fit(accumulation_data(22));
  const std::string path = testing::scratch_path("accumulated.safetensors");
  Trainer first = accumulating_trainer(3, 3, GetParam(), 2);
  first.fit(accumulation_data(22));
  first.save_checkpoint(path);
  Trainer resumed = accumulating_trainer(3, 3, GetParam(), 4);
  resumed.load_checkpoint(path);
  EXPECT_EQ(resumed.step(), 2 * 3);  // optimizer steps: 3 per epoch of 8 batches
  resumed.fit(accumulation_data(22));
  EXPECT_EQ(resumed.step(), uninterrupted.step());
  const std::vector<Tensor> actual = parameters_on_host(resumed);
  const std::vector<Tensor> expected = parameters_on_host(uninterrupted);
  for (size_t i = 0; i < expected.size(); ++i) EXPECT_EQ(actual[i].to_vector(), expected[i].to_vector()) << i;
  // Another accumulation is another setup.
  Trainer other = accumulating_trainer(3, 2, GetParam(), 4);
  EXPECT_ERROR(other.load_checkpoint(path), "accumulate_steps: 3 in the checkpoint, 2 now");
  std::filesystem::remove(path);
}

INSTANTIATE_TEST_SUITE_P(Devices, TrainerAccumulation,
                         ::testing::Values(std::vector<Device>{Device::cpu(0)},
                                           std::vector<Device>{Device::cpu(0), Device::cpu(1)}),
                         [](const ::testing::TestParamInfo<std::vector<Device>>& info) {
                           return "CPU" + std::to_string(info.param.size());
                         });

TEST(TrainerAccumulationOptions, AccumulateStepsBelowOneIsAnErrorNamingTheOption) {
  for (const int64_t steps : {int64_t{0}, int64_t{-2}}) {
    TrainerOptions options;
    options.devices = {Device::cpu(0)};
    options.accumulate_steps = steps;
    EXPECT_ERROR(Trainer(make_mlp(3, 4), options),
                 "Trainer: accumulate_steps is " + std::to_string(steps) + " but expected at least 1");
  }
}

TEST(TrainerAccumulationOptions, AccumulateStepsIsASetupFactWhenNotOne) {
  TrainerOptions options;
  options.devices = {Device::cpu(0)};
  EXPECT_EQ(Trainer(make_mlp(3, 4), options).setup().count("accumulate_steps"), 0u);
  options.accumulate_steps = 4;
  EXPECT_EQ(Trainer(make_mlp(3, 4), options).setup().at("accumulate_steps"), "4");
}

}  // namespace
}  // namespace tandem::trainers
