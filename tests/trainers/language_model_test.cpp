// LanguageModelTrainer: nanoGPT's learning-rate schedule, learning a small text on the CPU, the same run on one and
// on two devices, and its errors.
#include <cmath>
#include <fstream>

#include "support/test_support.h"
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

struct TrainedRun {
  LanguageModelResult result;
  std::vector<Tensor> parameters;
};

TrainedRun train_on(const std::vector<Device>& devices, int64_t steps, double dropout = 0.0) {
  const std::string path = write_text();
  const TextDataset train(path, kBlock), val(path, kBlock, {.split = TextSplit::Validation});
  manual_seed(7);
  auto gpt = make_gpt({.vocab_size = train.vocab_size(), .block_size = kBlock, .n_layer = 2, .n_head = 2,
                       .n_embd = 32, .dropout = dropout});
  LanguageModelTrainer trainer(gpt, {.devices = devices, .steps = steps, .batch_size = 8, .lr = 3e-3,
                                     .warmup_steps = 5, .eval_every = steps / 2, .eval_batches = 4, .seed = 11});
  TrainedRun run{trainer.fit(train, val), {}};
  for (const Tensor& p : gpt->parameters()) run.parameters.push_back(p.detach().to(Device::cpu()));
  return run;
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

// The same global batches cut over two devices give the one-device run's losses and parameters.
TEST(LanguageModelTrainer, TwoDevicesTrainAsOne) {
  const TrainedRun one = train_on({Device::cpu(0)}, 30);
  const TrainedRun two = train_on({Device::cpu(0), Device::cpu(1)}, 30);
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
