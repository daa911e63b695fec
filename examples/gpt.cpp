// A character-level GPT written as a PyTorch user writes nanoGPT's training loop: the model from trainers::make_gpt,
// batches of random windows of the text, logits = gpt(x) run data parallel over the devices, cross-entropy,
// backward, gradient clipping and AdamW, an estimate of the validation loss now and then, and a sample at the end.
// Exits 1 when the final validation loss is above --max-val-loss.
//
//   gpt [--devices cuda:0 | cpu:0,cpu:1 | all] [--data data/shakespeare.txt] [--steps 200] [--n-layer 2]
//       [--n-head 4] [--n-embd 128] [--block-size 64] [--batch 32] [--lr 0.002] [--sample 200] [--seed 1337]
//       [--max-val-loss 100]
//
// tandem-train --task language-model runs the same training, faster (one captured step per batch) and with nanoGPT's
// full configuration by default (docs/tandem-train.md).

#include <tandem/tandem.h>

#include <chrono>

#include "example_cli.h"

namespace {

using namespace tandem;

struct Options {
  std::string data = TANDEM_DATA_DIR "/shakespeare.txt";
  int64_t steps = 200, n_layer = 2, n_head = 4, n_embd = 128, block_size = 64, batch = 32, sample = 200;
  double lr = 2e-3, max_val_loss = 100.0;
  uint64_t seed = 1337;
};

// A batch of `rows` random windows of `data`: tokens [rows, T] and the next tokens [rows, T].
trainers::Example random_batch(const trainers::TextDataset& data, int64_t rows, Device device) {
  const std::vector<int64_t> starts = Tensor::randint(0, data.size(), {rows}).to_vector_as<int64_t>();
  const trainers::Example batch = data.get_batch(starts);
  return {batch.data.to(device), batch.target.to(device)};
}

Tensor loss_of(const Tensor& logits, const Tensor& targets) {
  return nn::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

double validation_loss(trainers::GPT& gpt, const trainers::TextDataset& val, int64_t batch, Device device) {
  const nn::TrainingModeGuard eval(gpt, false);
  const NoGradGuard no_grad;
  double total = 0.0;
  for (int i = 0; i < 10; ++i) {
    const trainers::Example b = random_batch(val, batch, device);
    total += loss_of(gpt(b.data), b.target).item();
  }
  return total / 10.0;
}

void train(const Options& options, const std::vector<Device>& devices) {
  const trainers::TextDataset train(options.data, options.block_size);
  const trainers::TextDataset val(options.data, options.block_size, {.split = trainers::TextSplit::Validation});
  manual_seed(options.seed);
  auto gpt = trainers::make_gpt({.vocab_size = train.vocab_size(), .block_size = options.block_size,
                                 .n_layer = options.n_layer, .n_head = options.n_head, .n_embd = options.n_embd});
  gpt->to(devices[0]);
  std::printf("GPT: %lld parameters on %s\n", static_cast<long long>(gpt->num_parameters()),
              to_string(devices).c_str());
  optim::AdamW adamw(gpt->parameters(), {.lr = options.lr, .betas = {0.9, 0.99}, .weight_decay = 0.1});
  const auto start = std::chrono::steady_clock::now();
  for (int64_t step = 1; step <= options.steps; ++step) {
    const trainers::Example batch = random_batch(train, options.batch, devices[0]);
    adamw.zero_grad();
    Tensor logits = parallel::data_parallel(gpt, batch.data, devices);  // scatter, replicate, apply, gather
    Tensor loss = loss_of(logits, batch.target);
    loss.backward();
    nn::utils::clip_grad_norm_(gpt->parameters(), 1.0);
    adamw.step();
    if (step % 50 == 0 || step == options.steps) {
      std::printf("step %lld: train loss %.4f, val loss %.4f\n", static_cast<long long>(step), loss.item(),
                  validation_loss(*gpt, val, options.batch, devices[0]));
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  const double final_val = validation_loss(*gpt, val, options.batch, devices[0]);
  std::printf("val loss %.4f after %lld steps (%.1f s)\n", final_val, static_cast<long long>(options.steps), seconds);
  if (options.sample > 0) {
    const Tensor prompt = Tensor::from_vector(train.encode("\n"), {1, 1}, devices[0]);
    const std::vector<int64_t> ids = gpt->generate(prompt, options.sample, 0.8, 50).to_vector_as<int64_t>();
    std::printf("sample:\n%s\n", train.decode(ids).c_str());
  }
  TANDEM_CHECK(final_val <= options.max_val_loss, "--max-val-loss: the validation loss is ", final_val,
               " but expected at most ", options.max_val_loss);
}

}  // namespace

int main(int argc, char** argv) {
  Options options;
  CLI::App app("A character-level GPT trained data parallel, written as a training loop", "gpt");
  app.add_option("--data", options.data, "A text file (characters are the tokens)")->capture_default_str();
  app.add_option("--steps", options.steps, "Optimizer steps")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--n-layer", options.n_layer, "Blocks")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--n-head", options.n_head, "Heads")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--n-embd", options.n_embd, "Width")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--block-size", options.block_size, "Context")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--batch", options.batch, "Windows per step")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--lr", options.lr, "AdamW's learning rate")->capture_default_str()->check(CLI::PositiveNumber);
  app.add_option("--sample", options.sample, "Characters to generate at the end")->capture_default_str();
  app.add_option("--seed", options.seed, "Seed of the initialization and the batches")->capture_default_str();
  app.add_option("--max-val-loss", options.max_val_loss, "Exit with status 1 above this final validation loss")
      ->capture_default_str();
  return tandem::examples::run_example(app, argc, argv, [&](const std::vector<Device>& devices) {
    train(options, devices);
  });
}
