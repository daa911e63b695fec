// The Trainer runs its training steps in the model's mode (training by default) and evaluates in eval mode, giving
// every module its mode back afterwards, as a PyTorch loop does with model.train() / model.eval().
#include <atomic>

#include "support/test_support.h"

namespace tandem::trainers {
namespace {

// Doubles its input in training mode, passes it through in eval mode, and counts its forwards in each mode. The
// counters are shared by the replicas (copies share the pointer); with fail_in_eval, a forward in eval mode throws.
class TrainingDoubles : public nn::Cloneable<TrainingDoubles> {
 public:
  struct Counts {
    std::atomic<int> training{0};
    std::atomic<int> eval{0};
    std::atomic<bool> fail_in_eval{false};
  };
  Tensor forward(const Tensor& x) override {
    ++(is_training() ? counts->training : counts->eval);
    TANDEM_CHECK(is_training() || !counts->fail_in_eval, "TrainingDoubles: failing in eval mode");
    return x * (is_training() ? 2.0f : 1.0f);
  }
  std::shared_ptr<Counts> counts = std::make_shared<Counts>();
};

// y = x0 - 2 x1 + 0.5 on `rows` rows.
TableDataset linear_data(int64_t rows) {
  TableDataset data;
  data.feature_names = {"x0", "x1"};
  data.target_name = "y";
  for (int64_t i = 0; i < rows; ++i) {
    const double x0 = static_cast<double>(i % 5) - 2.0;
    const double x1 = static_cast<double>(i % 3) * 0.5;
    data.features.insert(data.features.end(), {x0, x1});
    data.targets.push_back(x0 - 2.0 * x1 + 0.5);
  }
  return data;
}

struct ModeModel {
  std::shared_ptr<TrainingDoubles> doubles = std::make_shared<TrainingDoubles>();
  std::shared_ptr<nn::Sequential> net =
      std::make_shared<nn::Sequential>(nn::Sequential{std::make_shared<nn::Linear>(2, 1), doubles});
};

Trainer make_trainer(const ModeModel& model, bool warm_up = true) {
  manual_seed(0);
  TrainerOptions options;
  options.devices = {Device::cpu(0), Device::cpu(1)};
  options.epochs = 2;
  options.batch_size = 4;
  options.warm_up = warm_up;
  return Trainer(model.net, options);
}

TEST(TrainerModes, StepsTrainInTrainingModeAndEvaluationRunsInEvalMode) {
  ModeModel model;
  Trainer trainer = make_trainer(model, /*warm_up=*/false);
  trainer.fit(linear_data(10), linear_data(4));
  // 2 epochs of 3 batches (4, 4, 2 rows), each split over both replicas: 12 forwards, all in training mode.
  EXPECT_EQ(model.doubles->counts->training, 12);
  // The test set after each epoch, then the training and the test set at the end: 4 forwards, all in eval mode.
  EXPECT_EQ(model.doubles->counts->eval, 4);
  EXPECT_TRUE(model.net->is_training());
  EXPECT_EQ(model.net->training_modes(), std::vector<bool>(3, true));
}

TEST(TrainerModes, TheWarmUpRunsInTheSameModes) {
  ModeModel model;
  Trainer trainer = make_trainer(model);
  trainer.fit(linear_data(10), linear_data(4));
  // Before the clock, the throwaway copy (whose clones share the counters) takes the two batch shapes' steps three
  // times (TrainingStepOptions::warmup_steps + 1) on both replicas, 12 forwards in training mode, and the epoch's end
  // read evaluates the training and the test set once each in eval mode.
  EXPECT_EQ(model.doubles->counts->training, 12 + 12);
  EXPECT_EQ(model.doubles->counts->eval, 4 + 2);
  EXPECT_EQ(model.net->training_modes(), std::vector<bool>(3, true));
}

TEST(TrainerModes, PredictionsAreTheEvalModeOnesWhateverTheModelsModeAndThatModeIsRestored) {
  ModeModel model;
  Trainer trainer = make_trainer(model);
  trainer.fit(linear_data(10));
  const TableDataset data = linear_data(6);
  const std::vector<double> from_training_mode = trainer.predict(data);
  EXPECT_TRUE(model.net->is_training());
  model.net->eval();
  EXPECT_EQ(trainer.predict(data), from_training_mode);
  const RegressionMetrics metrics = trainer.evaluate(data);
  EXPECT_EQ(metrics.rows, 6);
  EXPECT_EQ(model.net->training_modes(), std::vector<bool>(3, false));  // eval before, eval after
  model.doubles->train();                                               // one submodule in its own mode
  trainer.evaluate(data);
  EXPECT_EQ(model.net->training_modes(), (std::vector<bool>{false, false, true}));
}

TEST(TrainerModes, TheModeIsRestoredWhenEvaluationThrows) {
  ModeModel model;
  Trainer trainer = make_trainer(model);
  trainer.fit(linear_data(10));
  model.doubles->counts->fail_in_eval = true;
  EXPECT_ERROR(trainer.evaluate(linear_data(4)), "TrainingDoubles: failing in eval mode");
  EXPECT_EQ(model.net->training_modes(), std::vector<bool>(3, true));
}

}  // namespace
}  // namespace tandem::trainers
