// TrainerOptions::zero_stage: the Trainer with sharded optimizer state (ZeRO stages 1 and 2, over a group of one
// process on three virtual CPU devices) trains as with replicated state, SGD with momentum and AdamW under a
// schedule, with a third of the state per device (and at stage 2 a third of the gradients); checkpoints that resume
// at another device count and stage; and what the stages refuse. The multi-process runs:
// tests/distributed/tandem_train_zero_np2.sh.
#include <filesystem>

#include "support/test_support.h"

namespace tandem::trainers {
namespace {

using testing::diabetes;

const std::vector<Device> kThreeCpus = {Device::cpu(0), Device::cpu(1), Device::cpu(2)};
constexpr int64_t kZeroEpochs = 8;

class ZeroEpochLosses : public Callback {
 public:
  void on_epoch_end(const Trainer& /*trainer*/, const EpochReport& report) override {
    losses.push_back(report.train_loss);
  }
  std::vector<double> losses;
};

struct ZeroRun {
  std::vector<double> losses;
  double test_mse = 0.0;
  size_t state_bytes = 0;
  size_t gradient_bytes = 0;
  std::vector<Tensor> parameters;
};

TrainerOptions zero_options(int zero_stage, bool adamw, size_t devices = 3, int64_t epochs = kZeroEpochs) {
  TrainerOptions options;
  options.group = comm::ProcessGroup::single({kThreeCpus.begin(), kThreeCpus.begin() + devices});
  options.zero_stage = zero_stage;
  options.epochs = epochs;
  options.resume_may_change = {"epochs"};
  options.sgd = {.lr = 0.01, .momentum = 0.9};
  if (adamw) {
    options.optimizer =
        CustomOptimizer{"adamw", [](std::vector<Tensor> parameters) {
                          return std::make_unique<optim::AdamW>(std::move(parameters), optim::AdamWOptions{.lr = 3e-3});
                        }};
    options.lr_schedule = parse_lr_schedule("warmup:2+cosine", kZeroEpochs);
  }
  return options;
}

ZeroRun fit_zero(int zero_stage, bool adamw) {
  manual_seed(0);
  Trainer trainer(make_mlp(10, 20), zero_options(zero_stage, adamw));
  auto log = std::make_shared<ZeroEpochLosses>();
  trainer.add_callback(log);
  const FitResult result = trainer.fit(diabetes().train, diabetes().test);
  ZeroRun run{log->losses,
              result.test->mse,
              trainer.optimizer_state_bytes_per_device(),
              trainer.gradient_bytes_per_device(),
              {}};
  for (const Tensor& parameter : trainer.model()->parameters()) run.parameters.push_back(parameter.clone());
  return run;
}

TEST(TrainerZero, ShardedStagesTrainAsStageZero) {
  for (const bool adamw : {false, true}) {
    const ZeroRun stage0 = fit_zero(0, adamw);
    EXPECT_EQ(stage0.gradient_bytes, sizeof(float) * 241);
    for (const int stage : {1, 2}) {
      SCOPED_TRACE(std::string(adamw ? "AdamW" : "SGD") + ", stage " + std::to_string(stage));
      const ZeroRun sharded = fit_zero(stage, adamw);
      ASSERT_EQ(sharded.losses.size(), static_cast<size_t>(kZeroEpochs));
      for (size_t e = 0; e < stage0.losses.size(); ++e) {
        EXPECT_NEAR(sharded.losses[e], stage0.losses[e], 1e-6 * stage0.losses[e]) << "epoch " << e;
      }
      EXPECT_NEAR(sharded.test_mse, stage0.test_mse, 1e-6 * stage0.test_mse);
      for (size_t i = 0; i < stage0.parameters.size(); ++i) {
        testing::expect_close(sharded.parameters[i], stage0.parameters[i], 1e-6, 1e-7);
      }
      // 241 parameter elements: one buffer (SGD's momentum) or two (Adam's moments) of them replicated; a third of
      // the padded buffers sharded (3 buckets at most, each padded by under one element per device). The gradients:
      // the padded flat buffer at stage 1, a third of it at stage 2.
      const size_t buffers = adamw ? 2 : 1;
      EXPECT_EQ(stage0.state_bytes, buffers * sizeof(float) * 241);
      EXPECT_GE(sharded.state_bytes * 3, stage0.state_bytes);
      EXPECT_LT(sharded.state_bytes * 3, stage0.state_bytes + buffers * sizeof(float) * 3 * 3);
      const size_t gradients = stage == 2 ? sharded.gradient_bytes * 3 : sharded.gradient_bytes;
      EXPECT_GE(gradients, stage0.gradient_bytes);
      EXPECT_LT(gradients, stage0.gradient_bytes + sizeof(float) * 3 * 3);
    }
  }
}

TEST(TrainerZero, ShardedStagesRefuseWhatTheyDoNotSupport) {
  manual_seed(0);
  // One group at a time in a process: each options' group goes before the next is created.
  EXPECT_ERROR(Trainer(make_mlp(10, 20), zero_options(3, false)),
               "Trainer: zero_stage is 3; expected 0 (replicated optimizer state), 1 (sharded optimizer state) or 2");
  {
    TrainerOptions lonely = zero_options(1, false);
    lonely.group = nullptr;
    lonely.devices = kThreeCpus;
    EXPECT_ERROR(Trainer(make_mlp(10, 20), lonely), "Trainer: zero_stage 1 shards the optimizer state over a group's");
  }
  Trainer trainer(make_mlp(10, 20), zero_options(1, false));
  EXPECT_ERROR((void)trainer.optimizer(), "Trainer::optimizer: zero_stage 1 shards the optimizer state");
  ASSERT_NE(trainer.sharded_optimizer(), nullptr);
}

struct Part {
  int zero_stage;
  size_t devices;
};

// The first half of the epochs at `before`, a checkpoint, the second half at `after` from it: the parameters of the
// uninterrupted run at `before` (Note [Checkpoints at any world size] in trainer_checkpoint.cpp).
std::vector<Tensor> fit_resharded(Part before, Part after, bool adamw) {
  const std::string path = testing::scratch_path("trainer_zero_resharded.safetensors");
  manual_seed(0);
  {
    Trainer first(make_mlp(10, 20), zero_options(before.zero_stage, adamw, before.devices, kZeroEpochs / 2));
    first.fit(diabetes().train, diabetes().test);
    first.save_checkpoint(path);
  }
  manual_seed(1);  // the resume restores the model, the optimizer and the generator
  Trainer resumed(make_mlp(10, 20), zero_options(after.zero_stage, adamw, after.devices));
  resumed.load_checkpoint(path);
  std::filesystem::remove(path);
  EXPECT_EQ(resumed.epoch(), kZeroEpochs / 2);
  resumed.fit(diabetes().train, diabetes().test);
  std::vector<Tensor> parameters;
  for (const Tensor& parameter : resumed.model()->parameters()) parameters.push_back(parameter.clone());
  return parameters;
}

TEST(TrainerZero, CheckpointsResumeAtAnotherDeviceCountAndStage) {
  for (const bool adamw : {false, true}) {
    SCOPED_TRACE(adamw ? "AdamW" : "SGD");
    const ZeroRun uninterrupted = fit_zero(1, adamw);
    for (const auto& [before, after] : std::vector<std::pair<Part, Part>>{{{1, 3}, {1, 2}},
                                                                          {{1, 3}, {0, 1}},
                                                                          {{0, 1}, {1, 3}},
                                                                          {{1, 2}, {1, 3}},
                                                                          {{2, 3}, {0, 1}},
                                                                          {{1, 2}, {2, 3}}}) {
      SCOPED_TRACE("stage " + std::to_string(before.zero_stage) + " on " + std::to_string(before.devices) +
                   " devices, then stage " + std::to_string(after.zero_stage) + " on " + std::to_string(after.devices));
      const std::vector<Tensor> resumed = fit_resharded(before, after, adamw);
      ASSERT_EQ(resumed.size(), uninterrupted.parameters.size());
      for (size_t i = 0; i < resumed.size(); ++i) {
        testing::expect_close(resumed[i], uninterrupted.parameters[i], 1e-6, 1e-7);
      }
    }
  }
}

}  // namespace
}  // namespace tandem::trainers
