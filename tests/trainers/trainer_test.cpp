
#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>

#include "support/test_support.h"
#include "support/tied_net.h"

namespace tandem::trainers {
namespace {

using tandem::testing::DeviceSet;
using tandem::testing::EveryDeviceSet;
using testing::error_message_of;

using testing::diabetes;

// The default options but for these. A resume may change the epoch count and the learning rate (the tests continue
// runs and make them diverge).
TrainerOptions test_options(std::vector<Device> devices, int64_t epochs, double lr = 0.01) {
  TrainerOptions options;
  options.devices = std::move(devices);
  options.epochs = epochs;
  options.sgd.lr = lr;
  options.resume_may_change = {"epochs", "lr"};
  return options;
}

// The seed net (Linear(10, 20) -> Linear(20, 1)) initialized with `init_seed`.
Trainer seed_net_trainer(std::vector<Device> devices, int64_t epochs, uint64_t init_seed = 0, double lr = 0.01) {
  manual_seed(init_seed);
  return Trainer(make_mlp(10, 20), test_options(std::move(devices), epochs, lr));
}

// The seed net with a dropout-like layer between its two layers, initialized with `init_seed`: every step draws a
// mask in each replica, from the replica's device's generator stream.
Trainer dropout_net_trainer(std::vector<Device> devices, int64_t epochs, uint64_t init_seed = 0) {
  manual_seed(init_seed);
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Linear>(10, 20));
  model->push_back(std::make_shared<tandem::testing::JitteredDropout>());
  model->push_back(std::make_shared<nn::Linear>(20, 1));
  return Trainer(model, test_options(std::move(devices), epochs));
}

// The seed net with AdamW and a warm-up + cosine schedule over 10 epochs (whatever `epochs` this run stops at), so
// that a resumed run must restore Adam's moments and step counts and continue the schedule at its epoch.
Trainer adamw_net_trainer(std::vector<Device> devices, int64_t epochs, uint64_t init_seed = 0) {
  manual_seed(init_seed);
  TrainerOptions options = test_options(std::move(devices), epochs);
  options.optimizer =
      CustomOptimizer{"adamw", [](std::vector<Tensor> parameters) {
                        return std::make_unique<optim::AdamW>(std::move(parameters), optim::AdamWOptions{.lr = 3e-3});
                      }};
  options.lr_schedule = parse_lr_schedule("warmup:2+cosine", 10);
  return Trainer(make_mlp(10, 20), options);
}

// Linear(10, 20) -> BatchNorm1d(20) -> Linear(20, 1): its running statistics are buffers a checkpoint must keep.
std::shared_ptr<nn::Module> batch_norm_net() {
  auto model = std::make_shared<nn::Sequential>();
  model->push_back(std::make_shared<nn::Linear>(10, 20));
  model->push_back(std::make_shared<nn::BatchNorm1d>(20));
  model->push_back(std::make_shared<nn::Linear>(20, 1));
  return model;
}

Trainer batch_norm_net_trainer(std::vector<Device> devices, int64_t epochs, uint64_t init_seed = 0) {
  manual_seed(init_seed);
  return Trainer(batch_norm_net(), test_options(std::move(devices), epochs));
}

// A net whose decoder.weight is its encoder.weight (support/tied_net.h), initialized with `init_seed`.
Trainer tied_net_trainer(std::vector<Device> devices, int64_t epochs, uint64_t init_seed = 0) {
  return Trainer(testing::make_tied_net(Device::cpu(0), init_seed), test_options(std::move(devices), epochs));
}

std::vector<std::vector<float>> parameter_values(const Trainer& trainer) {
  std::vector<std::vector<float>> values;
  for (const Tensor& p : trainer.model()->parameters()) values.push_back(p.to_vector());
  return values;
}

// Every buffer's values (as float32: BatchNorm's step count converts exactly).
std::vector<std::vector<float>> buffer_values(const Trainer& trainer) {
  std::vector<std::vector<float>> values;
  for (const Tensor& b : trainer.model()->buffers()) values.push_back(b.to(DType::Float32).to_vector());
  return values;
}

std::string file_bytes(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  std::ostringstream contents;
  contents << file.rdbuf();
  return contents.str();
}

// Records what the Trainer reports.
struct Recorder : Callback {
  std::vector<EpochReport> epochs;
  int64_t last_step = -1;
  void on_step_end(const Trainer&, const StepReport& report) override {
    if (last_step >= 0) EXPECT_EQ(report.step, last_step + 1);
    last_step = report.step;
  }
  void on_epoch_end(const Trainer&, const EpochReport& report) override { epochs.push_back(report); }
};

// Records the generator's state at the end of every epoch.
struct GeneratorAtEpochEnd : Callback {
  GeneratorState state;
  void on_epoch_end(const Trainer&, const EpochReport&) override { state = generator_state(); }
};

TEST(Trainer, DefaultsComeCloseToLeastSquaresOnDiabetes) {
  Trainer trainer = seed_net_trainer({Device::cpu(0)}, TrainerOptions{}.epochs);
  FitResult result = trainer.fit(diabetes().train, diabetes().test);
  ASSERT_TRUE(result.test.has_value());
  // Ordinary least squares on the same split reaches test R^2 0.5502 (data/README.md); the seed net is linear.
  EXPECT_GE(result.test->r2, 0.50);
  EXPECT_NEAR(result.test->r2, 0.5502, 0.01);
  EXPECT_EQ(result.test->rows, 88);
  EXPECT_EQ(result.train.rows, 354);
  EXPECT_EQ(result.epochs, 100);
  EXPECT_EQ(result.steps, 100 * 6);  // 354 rows in batches of 64: five full ones and one of 34
}

TEST(Trainer, PredictionsAreInTheTargetsUnits) {
  Trainer trainer = seed_net_trainer({Device::cpu(0)}, 3);
  trainer.fit(diabetes().train);
  const Standardizer& s = *trainer.standardizer();
  EXPECT_NEAR(s.target_mean, 153.0, 5.0);  // the diabetes target is in the hundreds

  // Reference: the two layers applied in float64 to the standardized first test row, then un-standardized.
  auto params = parameter_values(trainer);  // 0.weight [20, 10], 0.bias, 1.weight [1, 20], 1.bias
  const TableDataset& test = diabetes().test;
  double z = params[3][0];
  for (int h = 0; h < 20; ++h) {
    double hidden = params[1][h];
    for (int i = 0; i < 10; ++i) {
      hidden += params[0][h * 10 + i] * (test.feature(0, i) - s.feature_mean[i]) / s.feature_scale[i];
    }
    z += params[2][h] * hidden;
  }
  std::vector<double> predictions = trainer.predict(test);
  ASSERT_EQ(predictions.size(), 88u);
  EXPECT_NEAR(predictions[0], z * s.target_scale + s.target_mean, 1e-3);

  RegressionMetrics metrics = trainer.evaluate(test);
  RegressionMetrics reference = regression_metrics(predictions, test.targets);
  EXPECT_DOUBLE_EQ(metrics.mse, reference.mse);
  EXPECT_DOUBLE_EQ(metrics.r2, reference.r2);
}

// Trains the defaults on `devices` and on cpu:0 alone and expects the same parameters and metrics.
void expect_same_as_one_cpu(const std::vector<Device>& devices) {
  Trainer one = seed_net_trainer({Device::cpu(0)}, 100);
  FitResult expected = one.fit(diabetes().train, diabetes().test);
  Trainer many = seed_net_trainer(devices, 100);
  FitResult actual = many.fit(diabetes().train, diabetes().test);

  EXPECT_NEAR(actual.test->r2, expected.test->r2, 1e-5);
  EXPECT_NEAR(actual.train.r2, expected.train.r2, 1e-5);
  EXPECT_EQ(actual.steps, expected.steps);
  auto expected_params = one.model()->parameters();
  auto actual_params = many.model()->parameters();
  ASSERT_EQ(actual_params.size(), expected_params.size());
  for (size_t i = 0; i < actual_params.size(); ++i) {
    EXPECT_EQ(actual_params[i].device(), devices.front());
    tandem::testing::expect_close(actual_params[i], expected_params[i], 1e-5, 1e-5);
  }
}

class TrainerOnDevices : public EveryDeviceSet {};

TEST_P(TrainerOnDevices, SameResultAsOneDevice) { expect_same_as_one_cpu(devices()); }
TANDEM_INSTANTIATE_ON_EVERY_DEVICE_SET(TrainerOnDevices);

TEST(Trainer, SameResultOnOneGpu_CUDA) {
  TANDEM_REQUIRE_GPUS(1);
  expect_same_as_one_cpu({Device::cuda(0)});
}

// Trains `make(devices, 10 epochs, seed 0)` without a break, and again for 4 epochs with a checkpoint that a third
// trainer (other initial values) resumes and takes to 10 epochs: both must end with the same parameters and metrics.
// `rewrite`, when given, turns the checkpoint written after epoch 4 into the file that is resumed (another version).
void expect_resume_continues_exactly(
    const std::function<Trainer(std::vector<Device>, int64_t epochs, uint64_t init_seed)>& make,
    const std::vector<Device>& devices,
    const std::function<std::string(const std::string& path, const Trainer& written)>& rewrite = nullptr) {
  SCOPED_TRACE(to_string(devices));
  Trainer uninterrupted = make(devices, 10, 0);
  FitResult expected = uninterrupted.fit(diabetes().train, diabetes().test);

  const std::string path = testing::scratch_path("resume.safetensors");
  Trainer first = make(devices, 4, 0);
  first.add_callback(std::make_shared<CheckpointSaver>(path));
  auto saved = std::make_shared<GeneratorAtEpochEnd>();  // the state the checkpoint saw (fit draws after it)
  first.add_callback(saved);
  first.fit(diabetes().train, diabetes().test);

  Trainer resumed = make(devices, 10, /*init_seed=*/123);  // other initial values, overwritten
  resumed.load_checkpoint(rewrite ? rewrite(path, first) : path);
  EXPECT_EQ(resumed.epoch(), 4);
  EXPECT_EQ(resumed.step(), 24);
  EXPECT_EQ(generator_state(), saved->state);
  auto recorder = std::make_shared<Recorder>();
  resumed.add_callback(recorder);
  FitResult actual = resumed.fit(diabetes().train, diabetes().test);

  ASSERT_EQ(recorder->epochs.size(), 6u);
  EXPECT_EQ(recorder->epochs.front().epoch, 5);
  EXPECT_EQ(actual.epochs, 10);
  EXPECT_EQ(actual.steps, expected.steps);
  EXPECT_EQ(parameter_values(resumed), parameter_values(uninterrupted));
  EXPECT_EQ(buffer_values(resumed), buffer_values(uninterrupted));
  EXPECT_EQ(actual.test->mse, expected.test->mse);
  EXPECT_EQ(actual.train.mse, expected.train.mse);
}

TEST(Trainer, ResumeContinuesExactlyOnCpu) {
  for (const std::vector<Device>& devices :
       {std::vector<Device>{Device::cpu(0)}, std::vector<Device>{Device::cpu(0), Device::cpu(1)}}) {
    expect_resume_continues_exactly(
        [](std::vector<Device> on, int64_t epochs, uint64_t seed) { return seed_net_trainer(on, epochs, seed); },
        devices);
  }
}

TEST(Trainer, ResumeContinuesExactlyWithRandomLayersOnCpu) {
  const std::vector<Device> devices = {Device::cpu(0), Device::cpu(1), Device::cpu(2)};
  expect_resume_continues_exactly(dropout_net_trainer, devices);
  // The masks came from the devices' streams, whose counters the checkpoint carried.
  const GeneratorState state = generator_state();
  ASSERT_EQ(state.device_counters.size(), 3u);
  for (const auto& [device, counter] : state.device_counters) EXPECT_GT(counter, 0u) << device;
}

TEST(Trainer, ResumeContinuesExactlyWithAdamWAndAScheduleOnCpu) {
  for (const std::vector<Device>& devices :
       {std::vector<Device>{Device::cpu(0)}, std::vector<Device>{Device::cpu(0), Device::cpu(1)}}) {
    expect_resume_continues_exactly(
        [](std::vector<Device> on, int64_t epochs, uint64_t seed) { return adamw_net_trainer(on, epochs, seed); },
        devices);
  }
}

TEST(Trainer, ResumeContinuesExactlyWithBatchNormBuffersOnCpu) {
  expect_resume_continues_exactly(
      [](std::vector<Device> on, int64_t epochs, uint64_t seed) { return batch_norm_net_trainer(on, epochs, seed); },
      {Device::cpu(0), Device::cpu(1)});
}

// Note [Shared parameters] in nn/module.h: the checkpoint holds the shared weight once, under its first name, and a
// resume continues exactly with the tie kept (one tensor, loaded in place).
TEST(Trainer, ResumeContinuesExactlyWithATiedWeightOnCpu) {
  const std::vector<Device> devices = {Device::cpu(0), Device::cpu(1)};
  expect_resume_continues_exactly(tied_net_trainer, devices);

  const std::string path = testing::scratch_path("tied.safetensors");
  Trainer first = tied_net_trainer(devices, 1);
  first.add_callback(std::make_shared<CheckpointSaver>(path));
  first.fit(diabetes().train, diabetes().test);
  std::vector<std::string> model_names;
  for (const auto& [name, tensor] : load_tensors(path).tensors) {
    if (name.starts_with("model.")) model_names.push_back(name);
  }
  std::sort(model_names.begin(), model_names.end());
  EXPECT_EQ(model_names, (std::vector<std::string>{"model.decoder.bias", "model.encoder.bias", "model.encoder.weight",
                                                   "model.head.bias", "model.head.weight"}));

  Trainer resumed = tied_net_trainer(devices, 2, /*init_seed=*/5);
  resumed.load_checkpoint(path);
  const auto& net = dynamic_cast<const testing::TiedNet&>(*resumed.model());
  EXPECT_TRUE(net.decoder->weight.is_same(net.encoder->weight));
  EXPECT_EQ(parameter_values(resumed), parameter_values(first));
}

// A version 4 checkpoint of an SGD run rewritten as version 3 wrote it: parameters as model.<name>, the momentum
// buffers as momentum.<name>, no optimizer metadata.
std::string as_version3(const std::string& path, const Trainer& written) {
  TensorFile file = load_tensors(path);
  const optim::OptimizerState state = optim::read_optimizer_state(file, path);
  const auto parameters = written.model()->named_parameters();
  for (size_t i = 0; i < state.parameters.size(); ++i) {
    for (const auto& [slot, tensor] : state.parameters[i].tensors) {
      EXPECT_EQ(slot, "momentum_buffer");
      file.tensors.emplace_back("momentum." + parameters[i].first, tensor);
    }
  }
  nlohmann::json metadata = nlohmann::json::parse(file.metadata.at("tandem.trainer"));
  metadata["version"] = 3;
  metadata.erase("checksum");
  file.metadata["tandem.trainer"] = metadata.dump();
  const std::string version3 = testing::scratch_path("version3.safetensors");
  save_tensors(file.tensors, version3, file.metadata);
  return version3;
}

TEST(Trainer, Version3CheckpointsStillResumeExactly) {
  expect_resume_continues_exactly(
      [](std::vector<Device> on, int64_t epochs, uint64_t seed) { return seed_net_trainer(on, epochs, seed); },
      {Device::cpu(0), Device::cpu(1)}, as_version3);
  const Checkpoint loaded = load_checkpoint(testing::scratch_path("version3.safetensors"));
  EXPECT_EQ(loaded.version, 3);
  EXPECT_EQ(loaded.momentum_buffers.size(), 4u);

  // Version 3 kept no buffers: a model with running statistics cannot continue exactly from one.
  Trainer with_buffers = batch_norm_net_trainer({Device::cpu(0)}, 4);
  with_buffers.fit(diabetes().train);
  const std::string path = testing::scratch_path("buffers.safetensors");
  with_buffers.save_checkpoint(path);
  TensorFile file = load_tensors(path);
  optim::read_optimizer_state(file, path);
  nlohmann::json metadata = nlohmann::json::parse(file.metadata.at("tandem.trainer"));
  metadata["version"] = 3;
  metadata.erase("checksum");
  file.metadata["tandem.trainer"] = metadata.dump();
  save_tensors(file.tensors, path, file.metadata);
  EXPECT_ERROR(batch_norm_net_trainer({Device::cpu(0)}, 4).load_checkpoint(path),
               "is a version 3 checkpoint, which keeps no buffers, but the model has 3 (1.running_mean, ...)");
}

TEST(Trainer, CheckpointRoundTripsAdamStateAndBuffers) {
  const std::string path = testing::scratch_path("adam_buffers.safetensors");
  manual_seed(0);
  TrainerOptions options = test_options({Device::cpu(0), Device::cpu(1)}, 2);
  options.optimizer = CustomOptimizer{
      "adam", [](std::vector<Tensor> parameters) { return std::make_unique<optim::Adam>(std::move(parameters)); }};
  Trainer trainer(batch_norm_net(), options);
  trainer.fit(diabetes().train);
  trainer.save_checkpoint(path);

  const Checkpoint checkpoint = load_checkpoint(path);
  EXPECT_EQ(checkpoint.version, kCheckpointVersion);
  const auto state = trainer.model()->state_dict();
  ASSERT_EQ(checkpoint.model_state.size(), state.size());
  for (size_t i = 0; i < state.size(); ++i) {
    SCOPED_TRACE(state[i].first);
    EXPECT_EQ(checkpoint.model_state[i].first, state[i].first);
    EXPECT_EQ(checkpoint.model_state[i].second.dtype(), state[i].second.dtype());
    EXPECT_EQ(checkpoint.model_state[i].second.to(DType::Float32).to_vector(),
              state[i].second.to(DType::Float32).to_vector());
  }
  EXPECT_EQ(checkpoint.model_state[4].first, "1.running_mean");
  EXPECT_EQ(checkpoint.model_state[6].first, "1.num_batches_tracked");
  EXPECT_GT(checkpoint.model_state[6].second.to_vector_as<int64_t>().at(0), 0);

  const optim::OptimizerState adam = trainer.optimizer().state_dict();
  EXPECT_EQ(checkpoint.optimizer.kind, "optim::Adam");
  ASSERT_EQ(checkpoint.optimizer.parameters.size(), adam.parameters.size());
  for (size_t i = 0; i < adam.parameters.size(); ++i) {
    EXPECT_EQ(checkpoint.optimizer.parameters[i].step, 12);
    ASSERT_EQ(checkpoint.optimizer.parameters[i].tensors.size(), 2u);
    for (size_t t = 0; t < 2; ++t) {
      EXPECT_EQ(checkpoint.optimizer.parameters[i].tensors[t].first, adam.parameters[i].tensors[t].first);
      EXPECT_EQ(checkpoint.optimizer.parameters[i].tensors[t].second.to_vector(),
                adam.parameters[i].tensors[t].second.to_vector());
    }
  }

  // Loaded into a fresh trainer, every replica's optimizer holds the state and the model the buffers.
  manual_seed(5);
  Trainer resumed(batch_norm_net(), options);
  resumed.load_checkpoint(path);
  EXPECT_EQ(buffer_values(resumed), buffer_values(trainer));
  for (size_t d = 0; d < 2; ++d) {
    const optim::OptimizerState restored = resumed.optimizer().optimizer(d).state_dict();
    for (size_t i = 0; i < adam.parameters.size(); ++i) {
      EXPECT_EQ(restored.parameters[i].step, 12);
      EXPECT_EQ(restored.parameters[i].tensors[1].second.to_vector(), adam.parameters[i].tensors[1].second.to_vector());
    }
  }
}

TEST(Trainer, CheckpointHoldsTheTrainingState) {
  const std::string path = testing::scratch_path("state.safetensors");
  Trainer trainer = seed_net_trainer({Device::cpu(0)}, 2);
  trainer.fit(diabetes().train);
  trainer.save_checkpoint(path);

  Checkpoint checkpoint = load_checkpoint(path);
  EXPECT_EQ(checkpoint.epoch, 2);
  EXPECT_EQ(checkpoint.step, 12);
  EXPECT_EQ(checkpoint.version, kCheckpointVersion);
  ASSERT_EQ(checkpoint.model_state.size(), 4u);
  EXPECT_EQ(checkpoint.model_state[0].first, "0.weight");
  EXPECT_EQ(checkpoint.model_state[0].second.to_vector(), trainer.model()->parameters()[0].to_vector());
  EXPECT_TRUE(checkpoint.momentum_buffers.empty());
  EXPECT_EQ(checkpoint.optimizer.kind, "optim::SGD");
  ASSERT_EQ(checkpoint.optimizer.parameters.size(), 4u);
  ASSERT_EQ(checkpoint.optimizer.parameters[3].tensors.size(), 1u);
  EXPECT_EQ(checkpoint.optimizer.parameters[3].tensors[0].first, "momentum_buffer");
  EXPECT_EQ(checkpoint.optimizer.parameters[3].tensors[0].second.to_vector(),
            trainer.optimizer().state()[3].to_vector());
  EXPECT_EQ(checkpoint.standardizer.feature_mean, trainer.standardizer()->feature_mean);
  EXPECT_EQ(checkpoint.standardizer.target_scale, trainer.standardizer()->target_scale);

  DataLoader loader(diabetes().train, 64, true, /*seed=*/0);  // the default shuffle seed, two epochs drawn
  loader.begin_epoch();
  loader.begin_epoch();
  EXPECT_EQ(checkpoint.shuffle_state, loader.shuffle_state());
}

TEST(Trainer, CheckpointErrors) {
  const std::string path = testing::scratch_path("structure.safetensors");
  Trainer trainer = seed_net_trainer({Device::cpu(0)}, 4);
  trainer.fit(diabetes().train);
  trainer.save_checkpoint(path);

  manual_seed(0);
  Trainer narrow(make_mlp(10, 5), TrainerOptions{.devices = {Device::cpu(0)}});
  EXPECT_ERROR(narrow.load_checkpoint(path),
               "model: Sequential(0: Linear(in_features=10, out_features=20, bias=true), 1: Linear(in_features=20, "
               "out_features=1, bias=true)) in the checkpoint, Sequential(0: Linear(in_features=10, out_features=5");

  Trainer short_run = seed_net_trainer({Device::cpu(0)}, 3);
  EXPECT_ERROR(short_run.load_checkpoint(path), "is at epoch 4 but epochs is 3");

  const std::string plain = testing::scratch_path("plain.safetensors");
  save(*trainer.model(), plain);
  EXPECT_ERROR(short_run.load_checkpoint(plain), "is a tensor file but not a trainer checkpoint");
  EXPECT_ERROR(Trainer(make_mlp(10, 20), {}).save_checkpoint(path), "Trainer::save_checkpoint: nothing to save");
}

TEST(Trainer, NonFiniteLossStopsAndKeepsTheLastGoodCheckpoint) {
  const std::string path = testing::scratch_path("diverge.safetensors");
  std::filesystem::remove(path);
  Trainer good = seed_net_trainer({Device::cpu(0)}, 2);
  good.add_callback(std::make_shared<CheckpointSaver>(path));
  good.fit(diabetes().train);
  const std::string good_bytes = file_bytes(path);

  // Continuing at a learning rate of 1e10 overflows within a few steps of epoch 3.
  Trainer diverging = seed_net_trainer({Device::cpu(0)}, 5, 0, /*lr=*/1e10);
  diverging.load_checkpoint(path);
  diverging.add_callback(std::make_shared<CheckpointSaver>(path));
  const std::string message = error_message_of([&] { diverging.fit(diabetes().train); });
  EXPECT_NE(message.find("Trainer::fit: the loss is "), std::string::npos) << message;
  EXPECT_NE(message.find(" at epoch 3, step "), std::string::npos) << message;
  EXPECT_NE(message.find("the last checkpoint, \"" + path + "\" (epoch 2), holds the last good state"),
            std::string::npos)
      << message;
  EXPECT_EQ(file_bytes(path), good_bytes);
}

TEST(Trainer, NonFiniteLossWithoutCheckpointSaysSo) {
  Trainer diverging = seed_net_trainer({Device::cpu(0)}, 5, 0, /*lr=*/1e10);
  const std::string message = error_message_of([&] { diverging.fit(diabetes().train); });
  EXPECT_NE(message.find(" at epoch 1, step "), std::string::npos) << message;
  EXPECT_NE(message.find("training stopped; no checkpoint was written"), std::string::npos) << message;
}

TEST(Trainer, MetricsLoggerWritesOneJsonLinePerEpoch) {
  const std::string path = testing::scratch_path("metrics.jsonl");
  Trainer trainer = seed_net_trainer({Device::cpu(0)}, 3);
  auto recorder = std::make_shared<Recorder>();
  trainer.add_callback(std::make_shared<MetricsLogger>(path));
  trainer.add_callback(recorder);
  trainer.fit(diabetes().train, diabetes().test);

  std::ifstream file(path);
  std::string line;
  int64_t epoch = 0;
  while (std::getline(file, line)) {
    nlohmann::json entry = nlohmann::json::parse(line);
    const EpochReport& report = recorder->epochs.at(epoch);
    ++epoch;
    EXPECT_EQ(entry.at("epoch"), epoch);
    EXPECT_EQ(entry.at("epochs"), 3);
    EXPECT_EQ(entry.at("step"), 6 * epoch);
    EXPECT_DOUBLE_EQ(entry.at("train_loss").get<double>(), report.train_loss);
    EXPECT_DOUBLE_EQ(entry.at("test_mse").get<double>(), report.test->mse);
    EXPECT_DOUBLE_EQ(entry.at("test_r2").get<double>(), report.test->r2);
  }
  EXPECT_EQ(epoch, 3);
  EXPECT_ERROR(MetricsLogger("/nonexistent/dir/metrics.jsonl"),
               "MetricsLogger: cannot write '/nonexistent/dir/metrics.jsonl': the directory '/nonexistent/dir' does "
               "not exist");
}

std::vector<std::string> lines_of_file(const std::string& path) {
  std::vector<std::string> lines;
  std::ifstream file(path);
  for (std::string line; std::getline(file, line);) lines.push_back(line);
  return lines;
}

TEST(Trainer, MetricsLoggerStartsEmptyUnlessAppending) {
  const std::string path = testing::scratch_path("fresh_metrics.jsonl");
  std::ofstream(path) << "{\"epoch\":1}\nnot even JSON\n";
  Trainer trainer = seed_net_trainer({Device::cpu(0)}, 2);
  trainer.add_callback(std::make_shared<MetricsLogger>(path));
  trainer.fit(diabetes().train);
  const std::vector<std::string> lines = lines_of_file(path);
  ASSERT_EQ(lines.size(), 2u);
  EXPECT_EQ(nlohmann::json::parse(lines[1]).at("epoch"), 2);
}

// A run of 4 epochs checkpointed after epoch 2 only (as when it was killed before its next checkpoint), resumed from
// there to epoch 4: the metrics list epochs 1, 2, 3 and 4 once each.
TEST(Trainer, MetricsLoggerResumeDropsTheEpochsAfterTheCheckpoint) {
  const std::string metrics = testing::scratch_path("resumed_metrics.jsonl");
  const std::string checkpoint = testing::scratch_path("resumed_metrics.safetensors");
  struct SaveAfterEpochTwo : Callback {
    std::string path;
    void on_epoch_end(const Trainer& trainer, const EpochReport& report) override {
      if (report.epoch == 2) trainer.save_checkpoint(path);
    }
  };
  auto saver = std::make_shared<SaveAfterEpochTwo>();
  saver->path = checkpoint;
  Trainer first = seed_net_trainer({Device::cpu(0)}, 4);
  first.add_callback(std::make_shared<MetricsLogger>(metrics));
  first.add_callback(saver);
  first.fit(diabetes().train, diabetes().test);
  const std::vector<std::string> uninterrupted = lines_of_file(metrics);
  ASSERT_EQ(uninterrupted.size(), 4u);

  Trainer resumed = seed_net_trainer({Device::cpu(0)}, 4);
  resumed.load_checkpoint(checkpoint);
  resumed.add_callback(std::make_shared<MetricsLogger>(metrics, /*append=*/true));
  resumed.fit(diabetes().train, diabetes().test);
  const std::vector<std::string> lines = lines_of_file(metrics);
  ASSERT_EQ(lines.size(), 4u);
  for (size_t i = 0; i < lines.size(); ++i) {
    SCOPED_TRACE(lines[i]);
    const nlohmann::json entry = nlohmann::json::parse(lines[i]);
    EXPECT_EQ(entry.at("epoch"), i + 1);
    EXPECT_EQ(entry.at("train_loss").get<double>(),
              nlohmann::json::parse(uninterrupted[i]).at("train_loss").get<double>());
  }
  EXPECT_EQ(lines[0], uninterrupted[0]);  // the kept lines are the first run's, byte for byte
  EXPECT_EQ(lines[1], uninterrupted[1]);
}

TEST(Trainer, MetricsLoggerRefusesToResumeAFileThatIsNotJsonLines) {
  const std::string path = testing::scratch_path("bad_metrics.jsonl");
  Trainer trainer = seed_net_trainer({Device::cpu(0)}, 1);
  const std::pair<std::string, std::string> cases[] = {
      {"{\"epoch\":1}\nnot json\n", "line 2 is not a JSON object with a non-negative integer \"epoch\": not json"},
      {"{\"epoch\":1}\n{\"epoch\":2}\n[2]\n", "line 3 is not a JSON object"},
      {"{\"epoch\":\"1\"}\n", "line 1 is not a JSON object"},
      {"{\"epoch\":-1}\n", "line 1 is not a JSON object"},
      {"{\"epoch\":1}\n\n", "line 2 is not a JSON object with a non-negative integer \"epoch\": "},
      {"{\"epoch\":1}\n\x01\xff{\n", "line 2 is not a JSON object with a non-negative integer \"epoch\": \\x01\\xff{"},
  };
  for (const auto& [contents, fragment] : cases) {
    SCOPED_TRACE(contents);
    std::ofstream(path, std::ios::binary | std::ios::trunc) << contents;
    MetricsLogger logger(path, /*append=*/true);
    EXPECT_ERROR(logger.on_fit_begin(trainer), "MetricsLogger: \"" + path + "\" " + fragment);
    EXPECT_EQ(file_bytes(path), contents);  // left as it was
  }
}

// Note [Paced file writes]: a resumed log drops a last line that a power loss cut (no newline), and appends after the
// line before it; the lines arrive one per epoch whatever the sync interval, and a symlink stays a link.
TEST(Trainer, MetricsLoggerAppendsAndDropsATornLastLine) {
  const std::string metrics = testing::scratch_path("torn_metrics.jsonl");
  const std::string link = testing::scratch_path("torn_metrics.link");
  const std::string checkpoint = testing::scratch_path("torn_metrics.safetensors");
  struct Counter : Callback {
    std::string path;
    std::vector<size_t> lines_seen;  // the file's lines at each epoch's end, after the logger's
    void on_epoch_end(const Trainer&, const EpochReport&) override { lines_seen.push_back(lines_of_file(path).size()); }
  };
  auto counter = std::make_shared<Counter>();
  counter->path = metrics;
  std::filesystem::create_symlink(metrics, link);
  Trainer first = seed_net_trainer({Device::cpu(0)}, 3);
  first.add_callback(std::make_shared<MetricsLogger>(link, false, std::chrono::hours(1)));
  first.add_callback(counter);
  first.fit(diabetes().train, diabetes().test);
  EXPECT_EQ(counter->lines_seen, (std::vector<size_t>{1, 2, 3}));
  EXPECT_TRUE(std::filesystem::is_symlink(link));
  first.save_checkpoint(checkpoint);
  const std::vector<std::string> whole = lines_of_file(metrics);

  std::string bytes = file_bytes(metrics);
  std::ofstream(metrics, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() - 9);  // epoch 3 torn
  Trainer resumed = seed_net_trainer({Device::cpu(0)}, 5);
  resumed.load_checkpoint(checkpoint);
  resumed.add_callback(std::make_shared<MetricsLogger>(link, /*append=*/true));
  resumed.fit(diabetes().train, diabetes().test);
  const std::vector<std::string> lines = lines_of_file(metrics);
  ASSERT_EQ(lines.size(), 4u) << "epochs 1, 2 (kept), 4, 5 (this run); epoch 3's torn line is gone";
  EXPECT_EQ(lines[0], whole[0]);
  EXPECT_EQ(lines[1], whole[1]);
  EXPECT_EQ(nlohmann::json::parse(lines[2]).at("epoch"), 4);
  EXPECT_EQ(nlohmann::json::parse(lines[3]).at("epoch"), 5);
  EXPECT_EQ(file_bytes(metrics).back(), '\n');
  for (const std::string& path : {link, metrics, checkpoint}) std::filesystem::remove(path);
}

// TrainerOptions::standardize_features false: the model sees the features as they are (an identity standardizer),
// and a checkpoint's setup says so.
TEST(Trainer, FeaturesAsTheyAreWhenStandardizationIsOff) {
  TrainerOptions options;
  options.devices = {Device::cpu(0)};
  options.epochs = 1;
  options.sgd.lr = 1e-5;  // the raw features are in the hundreds
  options.standardize_features = false;
  manual_seed(0);
  Trainer trainer(make_mlp(10, 20), options);
  trainer.fit(diabetes().train);
  ASSERT_TRUE(trainer.standardizer().has_value());
  for (const double mean : trainer.standardizer()->feature_mean) EXPECT_EQ(mean, 0.0);
  for (const double scale : trainer.standardizer()->feature_scale) EXPECT_EQ(scale, 1.0);
  EXPECT_NE(trainer.standardizer()->target_scale, 1.0);  // the target is still standardized
  EXPECT_EQ(trainer.setup().at("standardize_features"), "false");
  options.standardize_features = true;
  EXPECT_FALSE(Trainer(make_mlp(10, 20), options).setup().contains("standardize_features"));
}

TEST(Trainer, ProgressPrinterLinesAndBar) {
  std::ostringstream plain;
  Trainer trainer = seed_net_trainer({Device::cpu(0)}, 2);
  trainer.add_callback(std::make_shared<ProgressPrinter>(plain, /*bar=*/false));
  trainer.fit(diabetes().train, diabetes().test);
  std::istringstream lines(plain.str());
  std::string line;
  std::vector<std::string> all;
  while (std::getline(lines, line)) all.push_back(line);
  ASSERT_EQ(all.size(), 2u);
  EXPECT_EQ(all[0].rfind("epoch 1/2  train_loss ", 0), 0u) << all[0];
  EXPECT_NE(all[1].find("test_r2 0."), std::string::npos) << all[1];
  EXPECT_EQ(plain.str().find('\r'), std::string::npos);

  std::ostringstream bar;
  Trainer with_bar = seed_net_trainer({Device::cpu(0)}, 1);
  with_bar.add_callback(std::make_shared<ProgressPrinter>(bar, /*bar=*/true));
  with_bar.fit(diabetes().train);
  EXPECT_NE(bar.str().find("] 1/6  loss "), std::string::npos) << bar.str();
  EXPECT_NE(bar.str().find("\r\x1b[Kepoch 1/1  train_loss "), std::string::npos) << bar.str();
}

TEST(Trainer, CheckpointSaverWritesEveryNthAndTheLastEpoch) {
  const std::string path = testing::scratch_path("every.safetensors");
  std::filesystem::remove(path);
  struct CheckpointEpochs : Callback {
    std::string path;
    std::vector<int64_t> seen;
    void on_epoch_end(const Trainer&, const EpochReport&) override {
      seen.push_back(std::filesystem::exists(path) ? load_checkpoint(path).epoch : 0);
    }
  };
  auto probe = std::make_shared<CheckpointEpochs>();
  probe->path = path;
  Trainer trainer = seed_net_trainer({Device::cpu(0)}, 5);
  trainer.add_callback(std::make_shared<CheckpointSaver>(path, 2));
  trainer.add_callback(probe);
  trainer.fit(diabetes().train);
  EXPECT_EQ(probe->seen, (std::vector<int64_t>{0, 2, 2, 4, 5}));

  EXPECT_ERROR(CheckpointSaver(path, 0), "CheckpointSaver: every is 0 but expected at least 1");
  EXPECT_ERROR(CheckpointSaver("/nonexistent/dir/model.safetensors"),
               "CheckpointSaver: cannot write '/nonexistent/dir/model.safetensors': the directory '/nonexistent/dir' "
               "does not exist");
}

TEST(Trainer, BadOptionsAreErrors) {
  EXPECT_ERROR(Trainer(make_mlp(2, 2), {.epochs = 0}), "Trainer: epochs is 0 but expected at least 1");
  EXPECT_ERROR(Trainer(make_mlp(2, 2), {.batch_size = 0}), "Trainer: batch_size is 0");
  EXPECT_ERROR(Trainer(make_mlp(2, 2), {.devices = {Device::cpu(0), Device::cpu(0)}}),
               "Trainer: device cpu:0 appears twice (entries 0 and 1) but expected distinct devices");
  EXPECT_ERROR(Trainer(nullptr, {}), "Trainer: the model is null");
  EXPECT_ERROR(Trainer(std::make_shared<nn::Sequential>(), {}), "has no parameters");
  if (cuda_device_count() < 8) {
    EXPECT_ERROR(Trainer(make_mlp(2, 2), {.devices = {Device::cuda(7)}}), "Trainer: device cuda:7 does not exist");
  }
  Trainer trainer(make_mlp(2, 2), {.devices = {Device::cpu(0)}});
  EXPECT_ERROR(trainer.predict(TableDataset{}), "Trainer::predict: no standardization yet");
  EXPECT_ERROR(trainer.fit(TableDataset{}), "Trainer::fit: the training set has no rows");
}

}  // namespace
}  // namespace tandem::trainers
