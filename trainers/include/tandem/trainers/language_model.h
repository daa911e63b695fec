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
// A checkpoint (save_checkpoint, checkpoint.h) holds the model (a tied tensor once), the AdamW state, the step count,
// the positions of the two window streams, the global generator (dropout's draws), the evaluations so far and the
// setup facts (setup()); a trainer of the same setup that loads it (load_checkpoint) and fits continues the run the
// checkpoint was written in exactly: the same windows, dropout masks, learning rates, parameters and evaluations as
// if it had never stopped. A run of fewer steps evaluates after its last step, so its checkpoint goes on as a longer
// run of the same setup would only when that step is one of eval_every's.
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
#include "tandem/trainers/language_model_progress.h"
#include "tandem/trainers/run_setup.h"
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

// nanoGPT's two AdamW groups of options' lr, betas and weight_decay: weight decay on the matrices (weights and
// embeddings), none on biases and norms; the optimizer of every device of the trainer's steps.
parallel::ReplicatedOptimizer::Factory nanogpt_adamw(const LanguageModelOptions& options);

// The mean cross-entropy of logits [b, T, V] against int64 targets [b, T]: a mean over the rows, as a step's loss
// (parallel::TrainingStep's loss) must be.
Tensor token_cross_entropy(const Tensor& logits, const Tensor& targets);

// What on_evaluation reports: the evaluation and where the fit stands.
struct LanguageModelEvaluationReport {
  LanguageModelEvaluation evaluation;
  int64_t steps = 0;                // options.steps
  double lr = 0.0;                  // of the evaluation's step (the last one trained)
  double tokens_per_second = 0.0;   // this fit's steps so far over their time (0 before any)
  double seconds = 0.0;             // since this fit began
};

struct LanguageModelResult {
  int64_t steps = 0;        // in all, those before a resume too
  int64_t tokens = 0;       // trained on in this fit: its steps * batch_size * block_size
  double seconds = 0.0;     // the whole of fit(), evaluations included
  double train_seconds = 0.0;  // the steps alone (the evaluations' time left out)
  double tokens_per_second = 0.0;  // tokens / train_seconds (0 for a fit that had no steps left)
  double train_loss = 0.0;  // of the last evaluation
  double val_loss = 0.0;
  std::vector<LanguageModelEvaluation> evaluations;  // of the whole run, those before a resume too
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

  // Called on rank 0 after each evaluation (progress printing, metrics, plots).
  void on_evaluation(std::function<void(const LanguageModelEvaluationReport&)> callback);
  // Called on every process after each step and its evaluation, if any, with the steps done so far (periodic
  // checkpoints: the state there is one a resume continues from).
  void on_step_end(std::function<void(int64_t step)> callback);

  // Trains from step() up to options.steps steps on `train` and evaluates on both splits (and after the last step,
  // unless the run's last evaluation is there). Collective under a group: every process calls it with the same data
  // and state (checked: an Error naming the rank that differs). Errors: data sets whose block_size differs from each
  // other's or exceeds the model's, or whose vocabulary is larger than the model's; a loss that becomes NaN or
  // infinite (at the evaluation that sees it).
  LanguageModelResult fit(const TextDataset& train, const TextDataset& val);

  // What a checkpoint records of the run and a resume must find again: the task, the GPT's configuration and every
  // option that shapes the steps ("n_layer": "6", "lr": "0.001", ...; "lr_decay_steps" as resolved, "precision" when
  // set). steps may change on a resume (a run goes on for longer); nothing else may.
  SetupFacts setup() const;
  // Writes a checkpoint of the state after step() steps (checkpoint.h), atomically, on rank 0 only (the other
  // processes' state is the same). Errors: save_checkpoint's.
  void save_checkpoint(const std::string& path) const;
  // Restores a checkpoint's state, all or nothing (Note [All-or-nothing resume] in trainer_checkpoint.cpp): the file
  // is validated as hostile input and checked against this trainer before anything is written. Collective under a
  // group (each process reads the file; rank 0's parameters are broadcast). Errors: load_checkpoint's; a Trainer's
  // checkpoint; SetupMismatch for another setup, listing each differing fact ("n_layer: 2 in the checkpoint, 1
  // now"); a checkpoint past options.steps; tensors or an optimizer state that do not fit the model; a damaged file.
  void load_checkpoint(const std::string& path);
  int64_t step() const { return steps_done_; }
  const std::vector<LanguageModelEvaluation>& evaluations() const { return progress_.evaluations; }

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
  std::function<void(const LanguageModelEvaluationReport&)> on_evaluation_;
  std::function<void(int64_t)> on_step_end_;
  int64_t steps_done_ = 0;
  LanguageModelProgress progress_;  // the streams' positions and the evaluations
};

}  // namespace tandem::trainers
