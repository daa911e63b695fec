// TrainerOptions::loss and TrainerOptions::optimizer: another loss and another optimizer on the data-parallel path,
// checked against a training loop written out by hand on cpu:0.

#include <filesystem>
#include <functional>

#include "support/test_support.h"
#include "support/velocity_optimizer.h"

namespace tandem::trainers {
namespace {

using tandem::testing::VelocityOptimizer;

using testing::diabetes;

const std::vector<Device> kCpu3 = {Device::cpu(0), Device::cpu(1), Device::cpu(2)};
constexpr int64_t kEpochs = 3;
constexpr float kLr = 0.01f;
constexpr float kDecay = 0.8f;

// The mean absolute error, with |x| = relu(x) + relu(-x).
Tensor l1_loss(const Tensor& output, const Tensor& target) {
  const Tensor difference = output - target;
  return mean(relu(difference) + relu(-difference));
}

Loss l1() { return {"l1", l1_loss, /*units_power=*/1}; }

CustomOptimizer velocity() {
  return {"velocity", [](std::vector<Tensor> parameters) {
            return std::make_unique<VelocityOptimizer>(std::move(parameters), kLr, kDecay);
          }};
}

TrainerOptions plugin_options(std::vector<Device> devices, int64_t epochs = kEpochs) {
  TrainerOptions options;
  options.devices = std::move(devices);
  options.epochs = epochs;
  options.loss = l1();
  options.optimizer = velocity();
  return options;
}

Trainer seed_net(const TrainerOptions& options) {
  manual_seed(0);
  return Trainer(make_mlp(10, 20), options);
}

struct EpochLosses : Callback {
  std::vector<double> losses;
  void on_epoch_end(const Trainer&, const EpochReport& report) override { losses.push_back(report.train_loss); }
};

// The Trainer's epochs written out on one device: standardize, shuffle with the same seed, and for every batch
// the loss of the whole batch, backward and `update` of the parameters. Returns each epoch's row-weighted mean loss
// in the target's units (`units_power` as Loss).
struct HandWritten {
  std::shared_ptr<nn::Module> net;
  std::vector<double> epoch_losses;
};
HandWritten train_by_hand(const LossFunction& loss, int units_power,
                          const std::function<void(const std::vector<Tensor>&)>& update) {
  manual_seed(0);
  HandWritten result{make_mlp(10, 20), {}};
  const Standardizer standardizer = Standardizer::fit(diabetes().train);
  const TableDataset data = standardizer.apply(diabetes().train);
  DataLoader loader(data, TrainerOptions{}.batch_size, /*shuffle=*/true, TrainerOptions{}.shuffle_seed);
  double to_units = 1.0;
  for (int i = 0; i < units_power; ++i) to_units *= standardizer.target_scale;
  for (int64_t epoch = 0; epoch < kEpochs; ++epoch) {
    loader.begin_epoch();
    double sum = 0.0;
    for (int64_t b = 0; b < loader.num_batches(); ++b) {
      const Batch batch = loader.batch(b);
      result.net->zero_grad();
      const Tensor value = loss(result.net->forward(batch.features), batch.targets);
      value.backward();
      update(result.net->parameters());
      sum += value.item() * to_units * static_cast<double>(batch.targets.size(0));
    }
    result.epoch_losses.push_back(sum / static_cast<double>(data.rows()));
  }
  return result;
}

void expect_same_training(const Trainer& trainer, const EpochLosses& reported, const HandWritten& expected) {
  const auto actual = trainer.model()->named_parameters();
  const auto reference = expected.net->named_parameters();
  ASSERT_EQ(actual.size(), reference.size());
  for (size_t i = 0; i < actual.size(); ++i) {
    SCOPED_TRACE(actual[i].first);
    tandem::testing::expect_close(actual[i].second, reference[i].second, 1e-5, 1e-5);
  }
  ASSERT_EQ(reported.losses.size(), expected.epoch_losses.size());
  for (size_t e = 0; e < reported.losses.size(); ++e)
    EXPECT_NEAR(reported.losses[e], expected.epoch_losses[e], 1e-5 * expected.epoch_losses[e]);
}

TEST(TrainerPlugins, L1LossWithSgdMatchesAHandWrittenLoop) {
  TrainerOptions options = plugin_options(kCpu3);
  options.optimizer.reset();
  Trainer trainer = seed_net(options);
  auto reported = std::make_shared<EpochLosses>();
  trainer.add_callback(reported);
  trainer.fit(diabetes().train);

  std::unique_ptr<optim::SGD> sgd;
  const HandWritten expected = train_by_hand(l1_loss, 1, [&](const std::vector<Tensor>& parameters) {
    if (!sgd) sgd = std::make_unique<optim::SGD>(parameters, TrainerOptions{}.sgd);
    sgd->step();
  });
  expect_same_training(trainer, *reported, expected);
  // The L1 fit is not the MSE fit: the loss really was replaced.
  Trainer mse = seed_net(TrainerOptions{.devices = kCpu3, .epochs = kEpochs});
  mse.fit(diabetes().train);
  EXPECT_GT(max_abs_diff(mse.model()->parameters()[0], trainer.model()->parameters()[0]), 1e-3);
}

TEST(TrainerPlugins, L1LossWithACustomOptimizerMatchesAHandWrittenLoop) {
  Trainer trainer = seed_net(plugin_options(kCpu3));
  auto reported = std::make_shared<EpochLosses>();
  trainer.add_callback(reported);
  trainer.fit(diabetes().train);

  std::vector<Tensor> velocities;  // v = decay * v + grad; p -= lr * v
  const HandWritten expected = train_by_hand(l1_loss, 1, [&](const std::vector<Tensor>& parameters) {
    NoGradGuard no_grad;
    velocities.resize(parameters.size());
    for (size_t i = 0; i < parameters.size(); ++i) {
      const Tensor grad = parameters[i].grad();
      velocities[i] = velocities[i].defined() ? velocities[i] * kDecay + grad : grad.clone();
      Tensor(parameters[i]).copy_(parameters[i] - velocities[i] * kLr);
    }
  });
  expect_same_training(trainer, *reported, expected);
  const std::vector<Tensor> state = trainer.optimizer().state();
  ASSERT_EQ(state.size(), velocities.size());
  tandem::testing::expect_close(state[0], velocities[0], 1e-5, 1e-5);
}

TEST(TrainerPlugins, TheirNamesAreSetupFactsAndAResumeContinuesExactly) {
  const std::vector<Device> devices = {Device::cpu(0), Device::cpu(1)};
  const SetupFacts defaults = seed_net(TrainerOptions{.devices = devices}).setup();
  EXPECT_EQ(defaults.at("loss"), "mse");
  EXPECT_EQ(defaults.at("optimizer"), "sgd");
  EXPECT_EQ(defaults.at("lr"), "0.01");

  TrainerOptions options = plugin_options(devices, /*epochs=*/4);
  options.setup = {{"lr", "0.01"}};  // a custom optimizer's hyperparameters are the caller's facts
  options.resume_may_change = {"epochs"};
  Trainer uninterrupted = seed_net(options);
  const SetupFacts facts = uninterrupted.setup();
  EXPECT_EQ(facts.at("loss"), "l1");
  EXPECT_EQ(facts.at("optimizer"), "velocity");
  EXPECT_EQ(facts.count("momentum"), 0u);
  uninterrupted.fit(diabetes().train);

  const std::string path = testing::scratch_path("plugins.safetensors");
  options.epochs = 2;
  Trainer first = seed_net(options);
  first.fit(diabetes().train);
  first.save_checkpoint(path);
  options.epochs = 4;
  Trainer resumed = seed_net(options);
  resumed.load_checkpoint(path);
  resumed.fit(diabetes().train);
  const auto expected = uninterrupted.model()->parameters();
  const auto actual = resumed.model()->parameters();
  for (size_t i = 0; i < actual.size(); ++i) EXPECT_EQ(actual[i].to_vector(), expected[i].to_vector());

  TrainerOptions other_loss = options;
  other_loss.loss = Loss::mse();
  EXPECT_ERROR(seed_net(other_loss).load_checkpoint(path), "loss: l1 in the checkpoint, mse now");
  TrainerOptions sgd = options;
  sgd.optimizer.reset();
  sgd.setup.clear();
  EXPECT_ERROR(seed_net(sgd).load_checkpoint(path), "optimizer: velocity in the checkpoint, sgd now");
  std::filesystem::remove(path);
}

TEST(TrainerPlugins, Errors) {
  TrainerOptions options = plugin_options({Device::cpu(0)});
  options.loss.name.clear();
  EXPECT_ERROR(seed_net(options), "Trainer: the loss needs a name and a function but got no name");
  options.loss = {"l1", nullptr};
  EXPECT_ERROR(seed_net(options), "Trainer: the loss needs a name and a function but got no function");
  options.loss = {"l1", l1_loss, -1};
  EXPECT_ERROR(seed_net(options), "Trainer: the loss's units_power is -1 but expected >= 0");
  options.loss = l1();
  options.optimizer->make = nullptr;
  EXPECT_ERROR(seed_net(options), "Trainer: the custom optimizer needs a name and a factory but got no factory");
  options.optimizer = CustomOptimizer{"", velocity().make};
  EXPECT_ERROR(seed_net(options), "Trainer: the custom optimizer needs a name and a factory but got no name");
  options.optimizer.reset();
  options.setup = {{"optimizer", "adam"}};
  EXPECT_ERROR(seed_net(options), "options.setup must not set \"optimizer\", which the Trainer records itself");

  options.setup.clear();
  options.loss = {"rows", [](const Tensor& output, const Tensor& target) { return output - target; }, 0};
  Trainer per_row = seed_net(options);
  EXPECT_ERROR(per_row.fit(diabetes().train),
               "parallel::TrainingStep::step: the loss of replica 0 has shape [64, 1] but expected one element");
}

}  // namespace
}  // namespace tandem::trainers
