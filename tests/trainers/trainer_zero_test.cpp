// TrainerOptions::zero_stage: the Trainer with sharded optimizer state (ZeRO stage 1, over a group of one process on
// three virtual CPU devices) trains as with replicated state, SGD with momentum and AdamW under a schedule, with a
// third of the state per device; and what stage 1 refuses. The multi-process runs: tests/distributed/
// tandem_train_zero_np2.sh.
#include <filesystem>

#include "support/test_support.h"

namespace tandem::trainers {
namespace {

using testing::diabetes;

const std::vector<Device> kThreeCpus = {Device::cpu(0), Device::cpu(1), Device::cpu(2)};

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
  std::vector<Tensor> parameters;
};

TrainerOptions zero_options(int zero_stage, bool adamw) {
  TrainerOptions options;
  options.group = comm::ProcessGroup::single(kThreeCpus);
  options.zero_stage = zero_stage;
  options.epochs = 8;
  options.sgd = {.lr = 0.01, .momentum = 0.9};
  if (adamw) {
    options.optimizer =
        CustomOptimizer{"adamw", [](std::vector<Tensor> parameters) {
                          return std::make_unique<optim::AdamW>(std::move(parameters), optim::AdamWOptions{.lr = 3e-3});
                        }};
    options.lr_schedule = parse_lr_schedule("warmup:2+cosine", 8);
  }
  return options;
}

ZeroRun fit_zero(int zero_stage, bool adamw) {
  manual_seed(0);
  Trainer trainer(make_mlp(10, 20), zero_options(zero_stage, adamw));
  auto log = std::make_shared<ZeroEpochLosses>();
  trainer.add_callback(log);
  const FitResult result = trainer.fit(diabetes().train, diabetes().test);
  ZeroRun run{log->losses, result.test->mse, trainer.optimizer_state_bytes_per_device(), {}};
  for (const Tensor& parameter : trainer.model()->parameters()) run.parameters.push_back(parameter.clone());
  return run;
}

TEST(TrainerZero, StageOneTrainsAsStageZero) {
  for (const bool adamw : {false, true}) {
    SCOPED_TRACE(adamw ? "AdamW" : "SGD");
    const ZeroRun stage0 = fit_zero(0, adamw);
    const ZeroRun stage1 = fit_zero(1, adamw);
    ASSERT_EQ(stage1.losses.size(), 8U);
    for (size_t e = 0; e < stage0.losses.size(); ++e) {
      EXPECT_NEAR(stage1.losses[e], stage0.losses[e], 1e-6 * stage0.losses[e]) << "epoch " << e;
    }
    EXPECT_NEAR(stage1.test_mse, stage0.test_mse, 1e-6 * stage0.test_mse);
    for (size_t i = 0; i < stage0.parameters.size(); ++i) {
      testing::expect_close(stage1.parameters[i], stage0.parameters[i], 1e-6, 1e-7);
    }
    // 241 parameter elements: one buffer (SGD's momentum) or two (Adam's moments) of them replicated; a third of the
    // padded buffers sharded (3 buckets at most, each padded by under one element per device).
    const size_t buffers = adamw ? 2 : 1;
    EXPECT_EQ(stage0.state_bytes, buffers * sizeof(float) * 241);
    EXPECT_GE(stage1.state_bytes * 3, stage0.state_bytes);
    EXPECT_LT(stage1.state_bytes * 3, stage0.state_bytes + buffers * sizeof(float) * 3 * 3);
  }
}

TEST(TrainerZero, StageOneRefusesWhatItDoesNotSupport) {
  manual_seed(0);
  // One group at a time in a process: each options' group goes before the next is created.
  EXPECT_ERROR(Trainer(make_mlp(10, 20), zero_options(2, false)),
               "Trainer: zero_stage is 2 (sharded gradients), which is not supported yet; expected 0");
  {
    TrainerOptions lonely = zero_options(1, false);
    lonely.group = nullptr;
    lonely.devices = kThreeCpus;
    EXPECT_ERROR(Trainer(make_mlp(10, 20), lonely), "Trainer: zero_stage 1 shards the optimizer state over a group's");
  }
  Trainer trainer(make_mlp(10, 20), zero_options(1, false));
  EXPECT_ERROR((void)trainer.optimizer(), "Trainer::optimizer: zero_stage 1 shards the optimizer state");
  ASSERT_NE(trainer.sharded_optimizer(), nullptr);
  trainer.fit(diabetes().train);
  const std::string path = (std::filesystem::temp_directory_path() / "tandem_trainer_zero.safetensors").string();
  EXPECT_ERROR(trainer.save_checkpoint(path), "checkpoints of sharded state are not supported yet");
  EXPECT_ERROR(trainer.load_checkpoint(path), "checkpoints of sharded state are not supported yet");
  EXPECT_FALSE(std::filesystem::exists(path));
}

}  // namespace
}  // namespace tandem::trainers
