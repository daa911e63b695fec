#pragma once
// LanguageModelTrainer: trains a GPT (gpt.h) on a TextDataset as nanoGPT's train.py does, data parallel on a list of
// devices or over the processes of a group, step by step:
//   - each step's global batch is batch_size windows at uniformly drawn starts of the training split (nanoGPT's
//     get_batch), drawn from a stream of the run's seed of its own (so dropout's draws do not move them): the same
//     windows for any number of devices and processes, each device taking its chunk of this process's share;
//   - AdamW with weight decay on the parameters of two or more dimensions only (nanoGPT's two groups), a learning rate
//     warmed up linearly over warmup_steps and then decayed along a cosine to min_lr at lr_decay_steps, and the
//     summed gradients clipped to max_grad_norm (parallel::TrainingStepOptions::max_grad_norm);
//   - every eval_every steps and after the last, the mean loss of eval_batches batches of each split (nanoGPT's
//     estimate_loss: random windows from an evaluation stream of the seed, the model in eval mode, no gradients), read
//     once per evaluation; the steps in between are not waited for.
// Each step is one parallel::TrainingStep, captured as a CUDA graph where it can be (Note [Capturing a step] in
// parallel/training_step.h); LanguageModelResult says how many steps replayed a graph and why the others did not.
//
//   auto train = trainers::TextDataset("data/shakespeare.txt", 256);
//   auto val = trainers::TextDataset("data/shakespeare.txt", 256, {.split = trainers::TextSplit::Validation});
//   manual_seed(1337);
//   auto gpt = trainers::make_gpt({.vocab_size = train.vocab_size(), .block_size = 256, .n_layer = 6, .n_head = 6,
//                                  .n_embd = 384, .dropout = 0.2});
//   trainers::LanguageModelTrainer trainer(gpt, {.devices = {Device::cuda(0)}, .precision = Precision::BFloat16});
//   trainers::LanguageModelResult result = trainer.fit(train, val);   // result.val_loss: nats per token

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "tandem/comm/process_group.h"
#include "tandem/core/device.h"
#include "tandem/core/precision.h"
#include "tandem/parallel/distributed.h"
#include "tandem/parallel/replicated.h"
#include "tandem/parallel/replicated_optimizer.h"
#include "tandem/parallel/training_step.h"
#include "tandem/trainers/gpt.h"
#include "tandem/trainers/text_dataset.h"

namespace tandem::trainers {

// The defaults are nanoGPT's character-level Shakespeare configuration (config/train_shakespeare_char.py).
struct LanguageModelOptions {
  std::vector<Device> devices;  // empty: default_devices(); the model lives on devices[0]
  // The processes that train together, each on group->devices() (then `devices` must be empty or the same list).
  std::shared_ptr<comm::ProcessGroup> group;
  int64_t steps = 5000;
  int64_t batch_size = 64;  // global: windows per step, over every device of every process
  double lr = 1e-3;
  double min_lr = 1e-4;
  int64_t warmup_steps = 100;
  std::optional<int64_t> lr_decay_steps;  // none: steps
  double beta1 = 0.9;
  double beta2 = 0.99;
  double weight_decay = 0.1;  // on the parameters of two or more dimensions
  double max_grad_norm = 1.0;  // 0: no clipping
  int64_t eval_every = 500;    // 0: only after the last step
  int64_t eval_batches = 200;
  std::optional<Precision> precision;  // of the model's products (nn::Module::set_precision); none: the model's own
  bool capture = true;
  uint64_t seed = 1337;  // of the batches' draws (the model's initialization is the caller's)
};

// An evaluation: after `step` steps, the mean loss of each split's evaluation batches (nats per token).
struct LanguageModelEvaluation {
  int64_t step = 0;
  double train_loss = 0.0;
  double val_loss = 0.0;
};

struct LanguageModelResult {
  int64_t steps = 0;
  int64_t tokens = 0;       // trained on: steps * batch_size * block_size
  double seconds = 0.0;     // the whole of fit(), evaluations included
  double train_seconds = 0.0;  // the steps alone (the evaluations' time left out)
  double tokens_per_second = 0.0;  // tokens / train_seconds
  double train_loss = 0.0;  // of the last evaluation
  double val_loss = 0.0;
  std::vector<LanguageModelEvaluation> evaluations;
  int64_t captured_steps = 0;
  std::string eager_reason;  // why the last eager step after the warm-up was not captured; "" when all were
};

class LanguageModelTrainer {
 public:
  // Moves the model to devices[0], sets its precision, replicates it (a DistributedDataParallel under a group, which
  // gives every process rank 0's parameters) and builds the optimizer. Collective under a group. Errors: a null
  // model; steps, batch_size or eval_batches below 1; eval_every, warmup_steps or a learning rate below 0; min_lr
  // above lr; betas outside [0, 1); max_grad_norm below 0; devices that are not the group's.
  LanguageModelTrainer(std::shared_ptr<GPT> model, LanguageModelOptions options);
  ~LanguageModelTrainer();

  // Called on rank 0 after each evaluation (progress printing).
  void on_evaluation(std::function<void(const LanguageModelEvaluation&)> callback);

  // Trains options.steps steps on `train` and evaluates on both splits. Collective under a group: every process calls
  // it with the same data. Errors: data sets whose block_size differs from each other's or exceeds the model's, or
  // whose vocabulary is larger than the model's; a loss that becomes NaN or infinite (at the evaluation that sees it).
  LanguageModelResult fit(const TextDataset& train, const TextDataset& val);

  // The mean loss of options.eval_batches random batches of `data` on devices[0] (eval mode, no gradients), drawn
  // from the evaluation stream (each call draws new ones).
  double estimate_loss(const TextDataset& data);

  // The learning rate of step `step` (0-based): nanoGPT's get_lr.
  double lr_at(int64_t step) const;

  const std::shared_ptr<GPT>& model() const { return model_; }
  const LanguageModelOptions& options() const { return options_; }
  const parallel::TrainingStep& training_step() const { return *step_; }

 private:
  // `count` window starts in [0, limit) from the seed's stream `stream`, advancing `counter`.
  std::vector<int64_t> draw_starts(uint64_t stream, uint64_t& counter, int64_t count, int64_t limit) const;
  bool primary() const { return !options_.group || options_.group->rank() == 0; }

  LanguageModelOptions options_;
  std::shared_ptr<GPT> model_;
  std::unique_ptr<parallel::DistributedDataParallel> distributed_;
  std::unique_ptr<parallel::ReplicatedModule> replicas_;
  std::unique_ptr<parallel::ReplicatedOptimizer> optimizer_;
  std::unique_ptr<parallel::TrainingStep> step_;
  std::function<void(const LanguageModelEvaluation&)> on_evaluation_;
  uint64_t train_draws_ = 0;  // values drawn from the batches' stream
  uint64_t eval_draws_ = 0;   // from the evaluation stream
};

}  // namespace tandem::trainers
