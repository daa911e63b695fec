// LanguageModelTrainer: nanoGPT's learning-rate schedule, learning a small text on the CPU, the same run on one and
// on two devices, and its errors.
#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "support/test_support.h"
#include "tandem/nn/serialize.h"
#include "tandem/trainers/checkpoint.h"
#include "tandem/trainers/language_model.h"

namespace tandem::trainers {
namespace {

// A text with structure a small model learns in a few dozen steps: verses of one pattern with varying words.
std::string write_text() {
  const char* words[] = {"cat", "dog", "owl", "fox", "bee"};
  std::string text;
  for (int i = 0; i < 400; ++i) text += std::string("the ") + words[i % 5] + " sat on the " + words[(i * 3) % 5] + ".\n";
  const std::string path = testing::scratch_path("verses.txt");
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

constexpr int64_t kBlock = 16;

#define EXPECT_CONTAINS(text, fragment) EXPECT_NE((text).find(fragment), std::string::npos) << (text)

struct TrainedRun {
  LanguageModelResult result;
  std::vector<Tensor> parameters;
};

struct RunSetup {
  std::vector<Device> devices;
  int64_t steps = 0;
  double dropout = 0.0;
  int64_t n_layer = 2;
  int64_t eval_every = 0;        // 0: steps / 2
  int64_t lr_decay_steps = 0;    // 0: none (steps)
  std::string resume;            // a checkpoint to start from
  std::string checkpoint;        // written after the last step
  bool capture = true;
};

TrainedRun train(const RunSetup& setup) {
  const std::string path = write_text();
  const TextDataset train(path, kBlock), val(path, kBlock, {.split = TextSplit::Validation});
  manual_seed(7);
  auto gpt = make_gpt({.vocab_size = train.vocab_size(), .block_size = kBlock, .n_layer = setup.n_layer,
                       .n_head = 2, .n_embd = 32, .dropout = setup.dropout});
  LanguageModelTrainer trainer(
      gpt, {.devices = setup.devices, .steps = setup.steps, .batch_size = 8, .lr = 3e-3, .warmup_steps = 5,
            .lr_decay_steps = setup.lr_decay_steps > 0 ? std::optional<int64_t>(setup.lr_decay_steps) : std::nullopt,
            .eval_every = setup.eval_every > 0 ? setup.eval_every : setup.steps / 2, .eval_batches = 4,
            .capture = setup.capture, .seed = 11});
  if (!setup.resume.empty()) trainer.load_checkpoint(setup.resume);
  TrainedRun run{trainer.fit(train, val), {}};
  if (!setup.checkpoint.empty()) trainer.save_checkpoint(setup.checkpoint);
  for (const Tensor& p : gpt->parameters()) run.parameters.push_back(p.detach().to(Device::cpu()));
  return run;
}

TrainedRun train_on(const std::vector<Device>& devices, int64_t steps, double dropout = 0.0) {
  return train({.devices = devices, .steps = steps, .dropout = dropout});
}

TEST(LanguageModelTrainer, TheLearningRateWarmsUpThenFollowsACosineToTheMinimum) {
  manual_seed(1);
  auto gpt = make_gpt({.vocab_size = 5, .block_size = 4, .n_layer = 1, .n_head = 1, .n_embd = 4});
  const LanguageModelTrainer trainer(
      gpt, {.devices = {Device::cpu(0)}, .steps = 100, .lr = 1e-3, .min_lr = 1e-4, .warmup_steps = 10});
  EXPECT_DOUBLE_EQ(trainer.lr_at(0), 1e-3 / 11.0);
  EXPECT_DOUBLE_EQ(trainer.lr_at(9), 1e-3 * 10.0 / 11.0);
  EXPECT_DOUBLE_EQ(trainer.lr_at(10), 1e-3);
  EXPECT_NEAR(trainer.lr_at(55), 1e-4 + 0.5 * 9e-4, 1e-15);  // halfway along the cosine
  EXPECT_NEAR(trainer.lr_at(100), 1e-4, 1e-15);
  EXPECT_DOUBLE_EQ(trainer.lr_at(101), 1e-4);
}

TEST(LanguageModelTrainer, LearnsASmallTextFarBelowTheUniformLoss) {
  const TrainedRun run = train_on({Device::cpu(0)}, 120);
  ASSERT_EQ(run.result.evaluations.size(), 2u);
  EXPECT_EQ(run.result.evaluations[0].step, 60);
  EXPECT_EQ(run.result.evaluations[1].step, 120);
  const double uniform = std::log(18.0);  // the text's 18 characters
  EXPECT_LT(run.result.val_loss, 0.5 * uniform) << "train " << run.result.train_loss;
  EXPECT_LT(run.result.evaluations[1].val_loss, run.result.evaluations[0].val_loss);
  EXPECT_EQ(run.result.tokens, 120 * 8 * kBlock);
  EXPECT_GT(run.result.tokens_per_second, 0.0);
  EXPECT_EQ(run.result.captured_steps, 0);
  EXPECT_NE(run.result.eager_reason.find("capture needs CUDA devices"), std::string::npos) << run.result.eager_reason;
}

// On a GPU every step after the warm-up is captured (the token embedding's index checks and the loss's class
// targets run on the device: Note [Index checks on the device] in core/src/backend.h), dropout included, and the
// captured run follows the eager one to float rounding.
TEST(LanguageModelTrainer, CapturedStepsOnAGpuFollowTheEagerRun_CUDA) {
  TANDEM_REQUIRE_GPUS(1);
  const TrainedRun captured = train({.devices = {Device::cuda(0)}, .steps = 20, .dropout = 0.1});
  const TrainedRun eager = train({.devices = {Device::cuda(0)}, .steps = 20, .dropout = 0.1, .capture = false});
  EXPECT_EQ(captured.result.eager_reason, "");
  EXPECT_GE(captured.result.captured_steps, 18);
  EXPECT_EQ(eager.result.captured_steps, 0);
  EXPECT_NEAR(captured.result.train_loss, eager.result.train_loss, 1e-3 * std::abs(eager.result.train_loss));
  EXPECT_NEAR(captured.result.val_loss, eager.result.val_loss, 1e-3 * std::abs(eager.result.val_loss));
  // Two eager runs differ too, in the last bits: the embeddings' gradients are atomic sums (scatter_add), and
  // AdamW's normalized steps carry such differences over 20 steps to about 2e-4 of a parameter's scale.
  ASSERT_EQ(captured.parameters.size(), eager.parameters.size());
  for (size_t i = 0; i < eager.parameters.size(); ++i)
    EXPECT_LT(testing::scaled_deviation(captured.parameters[i], eager.parameters[i]), 2e-3) << "parameter " << i;
}

// The same global batches cut over two devices give the one-device run's losses and parameters.
// The device-count invariance: 50 steps, dropout 0 (tests/distributed adds mpirun -np 2 through tandem-train).
TEST(LanguageModelTrainer, TwoDevicesTrainAsOne) {
  const TrainedRun one = train_on({Device::cpu(0)}, 50);
  const TrainedRun two = train_on({Device::cpu(0), Device::cpu(1)}, 50);
  ASSERT_EQ(one.result.evaluations.size(), two.result.evaluations.size());
  for (size_t i = 0; i < one.result.evaluations.size(); ++i) {
    EXPECT_NEAR(two.result.evaluations[i].val_loss, one.result.evaluations[i].val_loss,
                1e-5 * one.result.evaluations[i].val_loss);
    EXPECT_NEAR(two.result.evaluations[i].train_loss, one.result.evaluations[i].train_loss,
                1e-5 * one.result.evaluations[i].train_loss);
  }
  // AdamW divides each gradient by its running magnitude, so a weight whose gradient is mostly rounding noise moves by
  // lr-sized steps in either run: the parameters agree to the learning rate's scale, the losses to 1e-5.
  ASSERT_EQ(one.parameters.size(), two.parameters.size());
  for (size_t i = 0; i < one.parameters.size(); ++i) {
    testing::expect_close(two.parameters[i], one.parameters[i], 1e-3, 1e-4);
  }
}

// 12 steps, a checkpoint, and a resumed trainer to 24 steps: the parameters and every evaluation of 24 steps straight,
// bit for bit (the same windows, learning rates, AdamW moments and dropout masks), on one device and on two, with
// dropout.
TEST(LanguageModelTrainer, AResumedRunContinuesExactlyAsTheUninterruptedOne) {
  for (const std::vector<Device>& devices :
       {std::vector<Device>{Device::cpu(0)}, std::vector<Device>{Device::cpu(0), Device::cpu(1)}}) {
    SCOPED_TRACE(to_string(devices));
    const std::string checkpoint = testing::scratch_path("lm.ckpt");
    const RunSetup straight{.devices = devices, .steps = 24, .dropout = 0.2, .eval_every = 6};
    RunSetup first = straight;
    first.steps = 12;
    first.lr_decay_steps = 24;
    first.checkpoint = checkpoint;
    RunSetup rest = straight;
    rest.resume = checkpoint;
    const TrainedRun whole = train(straight);
    train(first);
    const TrainedRun resumed = train(rest);
    std::remove(checkpoint.c_str());
    EXPECT_EQ(resumed.result.steps, 24);
    EXPECT_EQ(resumed.result.tokens, 12 * 8 * kBlock);  // this fit's
    ASSERT_EQ(whole.result.evaluations.size(), 4u);
    EXPECT_EQ(resumed.result.evaluations, whole.result.evaluations);
    ASSERT_EQ(resumed.parameters.size(), whole.parameters.size());
    for (size_t i = 0; i < whole.parameters.size(); ++i) {
      EXPECT_EQ(resumed.parameters[i].to_vector(), whole.parameters[i].to_vector()) << "parameter " << i;
    }
  }
}

// The tied embedding and head are one tensor in the file, and the resume restores the tie.
TEST(LanguageModelTrainer, ACheckpointStoresTheTiedWeightOnce) {
  const std::string checkpoint = testing::scratch_path("tied.ckpt");
  train({.devices = {Device::cpu(0)}, .steps = 2, .checkpoint = checkpoint});
  const Checkpoint saved = load_checkpoint(checkpoint);
  std::remove(checkpoint.c_str());
  int tied = 0;
  for (const auto& [name, tensor] : saved.model_state) tied += name == "transformer.wte.weight" || name == "lm_head.weight";
  EXPECT_EQ(tied, 1);
  ASSERT_TRUE(saved.language_model.has_value());
  EXPECT_EQ(saved.step, 2);
  EXPECT_EQ(saved.language_model->train_draws, 2u * 8u);
  EXPECT_EQ(saved.language_model->eval_draws, 2u * 2u * 4u * 8u);  // two evaluations of both splits
  EXPECT_EQ(saved.setup.at("n_layer"), "2");
}

TEST(LanguageModelTrainer, AResumeOfAnotherSetupOrFileIsRefusedAndChangesNothing) {
  const std::string checkpoint = testing::scratch_path("other.ckpt");
  train({.devices = {Device::cpu(0)}, .steps = 6, .checkpoint = checkpoint});
  const std::string path = write_text();
  const TextDataset data(path, kBlock);
  manual_seed(7);
  auto gpt = make_gpt({.vocab_size = data.vocab_size(), .block_size = kBlock, .n_layer = 1, .n_head = 2, .n_embd = 32});
  const std::vector<float> before = gpt->parameters().front().to_vector();
  LanguageModelTrainer other(gpt, {.devices = {Device::cpu(0)}, .steps = 6, .batch_size = 8, .lr = 3e-3,
                                   .warmup_steps = 5, .eval_every = 3, .eval_batches = 4, .seed = 11});
  EXPECT_ERROR(other.load_checkpoint(checkpoint), "belongs to another setup: n_layer: 2 in the checkpoint, 1 now");
  EXPECT_EQ(other.step(), 0);
  EXPECT_EQ(gpt->parameters().front().to_vector(), before);
  auto same = make_gpt({.vocab_size = data.vocab_size(), .block_size = kBlock, .n_layer = 2, .n_head = 2, .n_embd = 32});
  LanguageModelTrainer shorter(same, {.devices = {Device::cpu(0)}, .steps = 5, .batch_size = 8, .lr = 3e-3,
                                      .warmup_steps = 5, .lr_decay_steps = 6, .eval_every = 3, .eval_batches = 4,
                                      .seed = 11});
  EXPECT_ERROR(shorter.load_checkpoint(checkpoint), "is at step 6 but steps is 5");
  std::remove(checkpoint.c_str());
}

// A checkpoint at a run's last step resumes to the same number of steps without training: its last evaluation.
TEST(LanguageModelTrainer, AResumeAtTheLastStepTrainsNothing) {
  const std::string checkpoint = testing::scratch_path("done.ckpt");
  const TrainedRun run = train({.devices = {Device::cpu(0)}, .steps = 4, .checkpoint = checkpoint});
  const TrainedRun again = train({.devices = {Device::cpu(0)}, .steps = 4, .resume = checkpoint});
  std::remove(checkpoint.c_str());
  EXPECT_EQ(again.result.evaluations, run.result.evaluations);
  EXPECT_EQ(again.result.tokens, 0);
  EXPECT_EQ(again.result.tokens_per_second, 0.0);
  EXPECT_EQ(again.parameters.front().to_vector(), run.parameters.front().to_vector());
}

// The progress a language model's checkpoint records is hostile input as the rest: every field checked by name.
TEST(LanguageModelTrainer, ACheckpointsProgressIsValidatedFieldByField) {
  const std::string checkpoint = testing::scratch_path("progress.ckpt"), edited = testing::scratch_path("edited.ckpt");
  train({.devices = {Device::cpu(0)}, .steps = 4, .checkpoint = checkpoint});
  const TensorFile file = load_tensors(checkpoint);
  const nlohmann::json state = nlohmann::json::parse(file.metadata.at("tandem.trainer"));
  const auto error_of = [&](const nlohmann::json& changed) {
    TensorFile copy = file;
    copy.metadata["tandem.trainer"] = changed.dump();
    save_tensors(copy.tensors, edited, copy.metadata);
    std::string message = "(no error)";
    try {
      load_checkpoint(edited);
    } catch (const Error& e) {
      message = e.what();
    }
    return message;
  };
  nlohmann::json changed = state;
  changed["language_model"]["evaluations"][1]["step"] = 2;
  EXPECT_CONTAINS(error_of(changed), "evaluations[1] is at step 2 but expected a step after 2");
  changed = state;
  changed["language_model"]["evaluations"][0]["step"] = 5;
  EXPECT_CONTAINS(error_of(changed), "step is 5 but expected an integer in [0, 4]");
  changed = state;
  changed["language_model"]["evaluations"][0]["val_loss"] = "1.5";
  EXPECT_CONTAINS(error_of(changed), "evaluations[0].val_loss is \"1.5\" but expected a finite number");
  changed = state;
  changed["language_model"]["train_draws"] = -1;
  EXPECT_CONTAINS(error_of(changed), "train_draws is -1 but expected an integer");
  changed = state;
  changed["language_model"].erase("eval_draws");
  EXPECT_CONTAINS(error_of(changed), "the field \"eval_draws\" is missing");
  changed = state;
  changed["standardizer"] = nlohmann::json::object();
  EXPECT_CONTAINS(error_of(changed), "both the fields \"standardizer\" and \"language_model\" are there");
  changed = state;
  changed["epoch"] = 1;
  EXPECT_CONTAINS(error_of(changed), "a language model's epoch (1) and shuffle_state (0) must be 0");
  std::remove(checkpoint.c_str());
  std::remove(edited.c_str());
}

TEST(LanguageModelTrainer, BadOptionsAndDataAreErrors) {
  auto gpt = make_gpt({.vocab_size = 5, .block_size = 4, .n_layer = 1, .n_head = 1, .n_embd = 4});
  EXPECT_ERROR(LanguageModelTrainer(gpt, {.devices = {Device::cpu(0)}, .steps = 0}),
               "trainers::LanguageModelTrainer: steps (0), batch_size (64) and eval_batches (200) must be at least 1");
  EXPECT_ERROR(LanguageModelTrainer(gpt, {.devices = {Device::cpu(0)}, .lr = 1e-4, .min_lr = 1e-3}),
               "min_lr <= lr");
  EXPECT_ERROR(LanguageModelTrainer(nullptr, {}), "trainers::LanguageModelTrainer: the model is null");
  LanguageModelTrainer trainer(gpt, {.devices = {Device::cpu(0)}, .steps = 1});
  const std::string path = write_text();
  EXPECT_ERROR(trainer.fit(TextDataset(path, 8), TextDataset(path, 8, {.split = TextSplit::Validation})),
               "::fit: the data's block sizes (8, 8) must be equal and at most the model's 4");
  EXPECT_ERROR(trainer.fit(TextDataset(path, 4), TextDataset(path, 4, {.split = TextSplit::Validation})),
               "::fit: the data's vocabulary (18 tokens) is larger than the model's 5");
}

}  // namespace
}  // namespace tandem::trainers
