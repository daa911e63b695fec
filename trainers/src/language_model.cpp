#include "tandem/trainers/language_model.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numbers>
#include <utility>

#include "checkpoint_restore.h"
#include "tandem/core/error.h"
#include "tandem/core/grad_mode.h"
#include "tandem/core/ops.h"
#include "tandem/core/random.h"
#include "tandem/core/splitmix64.h"
#include "tandem/nn/loss_functions.h"
#include "tandem/nn/training_mode_guard.h"
#include "tandem/optim/adam.h"
#include "tandem/trainers/checkpoint.h"

namespace tandem::trainers {
namespace {

constexpr const char* kTrainer = "trainers::LanguageModelTrainer";
// The keys of the two streams of starts drawn from the seed: the training batches' and the evaluations'.
constexpr uint64_t kTrainStream = 0x6c6d2d747261696eull;
constexpr uint64_t kEvalStream = 0x6c6d2d6576616c73ull;

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

LanguageModelOptions validated(LanguageModelOptions o) {
  TANDEM_CHECK(o.steps >= 1 && o.batch_size >= 1 && o.eval_batches >= 1, kTrainer, ": steps (", o.steps,
               "), batch_size (", o.batch_size, ") and eval_batches (", o.eval_batches, ") must be at least 1");
  TANDEM_CHECK(o.eval_every >= 0 && o.warmup_steps >= 0, kTrainer, ": eval_every (", o.eval_every,
               ") and warmup_steps (", o.warmup_steps, ") must be >= 0");
  TANDEM_CHECK(o.lr >= 0.0 && o.min_lr >= 0.0 && o.min_lr <= o.lr, kTrainer, ": lr ", o.lr, " and min_lr ", o.min_lr,
               " must satisfy 0 <= min_lr <= lr");
  TANDEM_CHECK(o.beta1 >= 0.0 && o.beta1 < 1.0 && o.beta2 >= 0.0 && o.beta2 < 1.0, kTrainer, ": betas ", o.beta1,
               ", ", o.beta2, " must lie in [0, 1)");
  TANDEM_CHECK(o.weight_decay >= 0.0 && o.max_grad_norm >= 0.0, kTrainer, ": weight_decay (", o.weight_decay,
               ") and max_grad_norm (", o.max_grad_norm, ") must be >= 0");
  TANDEM_CHECK(!o.lr_decay_steps || *o.lr_decay_steps >= o.warmup_steps, kTrainer, ": lr_decay_steps ",
               o.lr_decay_steps.value_or(0), " is below warmup_steps ", o.warmup_steps);
  if (o.group) {
    TANDEM_CHECK(o.devices.empty() || o.devices == o.group->devices(), kTrainer, ": devices ", to_string(o.devices),
                 " are not the group's ", to_string(o.group->devices()));
    o.devices = o.group->devices();
  }
  if (o.devices.empty()) o.devices = default_devices();
  const int64_t world = o.group ? o.group->size() : 1;
  TANDEM_CHECK(o.batch_size >= world, kTrainer, ": batch_size ", o.batch_size, " is smaller than the ", world,
               " processes");
  return o;
}

std::shared_ptr<GPT> placed(std::shared_ptr<GPT> model, const LanguageModelOptions& options) {
  TANDEM_CHECK(model != nullptr, kTrainer, ": the model is null");
  model->to(options.devices.front());
  if (options.precision) model->set_precision(*options.precision);  // before the replicas copy it
  return model;
}

}  // namespace

// The groups are runs of consecutive parameters, so that the optimizer lists them in the order it was given them (as
// ReplicatedOptimizer requires): a new group starts wherever the kind changes.
parallel::ReplicatedOptimizer::Factory nanogpt_adamw(const LanguageModelOptions& options) {
  const optim::AdamWOptions decayed{.lr = options.lr, .betas = {options.beta1, options.beta2},
                                    .weight_decay = options.weight_decay};
  optim::AdamWOptions plain = decayed;
  plain.weight_decay = 0.0;
  return [decayed, plain](std::vector<Tensor> parameters) {
    std::vector<optim::ParamGroup<optim::AdamWOptions>> groups;
    bool decaying = false;
    for (Tensor& p : parameters) {
      const bool matrix = p.dim() >= 2;
      if (groups.empty() || matrix != decaying)
        groups.push_back({.parameters = {}, .options = matrix ? decayed : plain});
      decaying = matrix;
      groups.back().parameters.push_back(std::move(p));
    }
    return std::make_unique<optim::AdamW>(std::move(groups), decayed);
  };
}

Tensor token_cross_entropy(const Tensor& logits, const Tensor& targets) {
  return nn::cross_entropy(logits.reshape({-1, logits.size(-1)}), targets.reshape({-1}));
}

LanguageModelTrainer::LanguageModelTrainer(std::shared_ptr<GPT> model, LanguageModelOptions options)
    : options_(validated(std::move(options))), model_(placed(std::move(model), options_)) {
  if (options_.group) {
    // Before the parameters' broadcast, which processes of different models could not agree on.
    check_same_setup(*options_.group, setup(), {}, kTrainer);
    distributed_ = std::make_unique<parallel::DistributedDataParallel>(
        model_, options_.group, parallel::DistributedOptions{.reduction = comm::ReduceOp::Sum});
  } else {
    replicas_ = std::make_unique<parallel::ReplicatedModule>(model_, options_.devices);
  }
  parallel::ReplicatedModule& replicated = distributed_ ? distributed_->replicated() : *replicas_;
  optimizer_ = std::make_unique<parallel::ReplicatedOptimizer>(replicated, nanogpt_adamw(options_));
  const parallel::TrainingStepOptions step_options{
      .capture = options_.capture,
      .max_grad_norm = options_.max_grad_norm > 0.0 ? std::optional<double>(options_.max_grad_norm) : std::nullopt};
  step_ = distributed_ ? std::make_unique<parallel::TrainingStep>(*distributed_, *optimizer_, token_cross_entropy,
                                                                  step_options)
                       : std::make_unique<parallel::TrainingStep>(replicated, *optimizer_, token_cross_entropy,
                                                                  step_options);
}

LanguageModelTrainer::~LanguageModelTrainer() = default;

void LanguageModelTrainer::on_evaluation(std::function<void(const LanguageModelEvaluationReport&)> callback) {
  on_evaluation_ = std::move(callback);
}

void LanguageModelTrainer::on_step_end(std::function<void(int64_t)> callback) { on_step_end_ = std::move(callback); }

SetupFacts LanguageModelTrainer::setup() const {
  const GPTConfig& c = model_->config();
  const LanguageModelOptions& o = options_;
  const auto integer = [](int64_t value) { return std::to_string(value); };
  SetupFacts facts = {{"task", "language-model"},
                      {"vocab_size", integer(c.vocab_size)},
                      {"block_size", integer(c.block_size)},
                      {"n_layer", integer(c.n_layer)},
                      {"n_head", integer(c.n_head)},
                      {"n_embd", integer(c.n_embd)},
                      {"dropout", exact_text(c.dropout)},
                      {"bias", c.bias ? "true" : "false"},
                      {"steps", integer(o.steps)},
                      {"batch_size", integer(o.batch_size)},
                      {"lr", exact_text(o.lr)},
                      {"min_lr", exact_text(o.min_lr)},
                      {"warmup_steps", integer(o.warmup_steps)},
                      {"lr_decay_steps", integer(o.lr_decay_steps.value_or(o.steps))},
                      {"beta1", exact_text(o.beta1)},
                      {"beta2", exact_text(o.beta2)},
                      {"weight_decay", exact_text(o.weight_decay)},
                      {"max_grad_norm", exact_text(o.max_grad_norm)},
                      {"eval_every", integer(o.eval_every)},
                      {"eval_batches", integer(o.eval_batches)},
                      {"seed", std::to_string(o.seed)}};
  if (o.precision) facts["precision"] = precision_name(*o.precision);
  return facts;
}

double LanguageModelTrainer::lr_at(int64_t step) const {
  const double lr = options_.lr, min_lr = options_.min_lr;
  const int64_t warmup = options_.warmup_steps, decay = options_.lr_decay_steps.value_or(options_.steps);
  if (step < warmup) return lr * static_cast<double>(step + 1) / static_cast<double>(warmup + 1);
  if (step > decay) return min_lr;
  if (decay == warmup) return min_lr;
  const double ratio = static_cast<double>(step - warmup) / static_cast<double>(decay - warmup);
  return min_lr + 0.5 * (1.0 + std::cos(std::numbers::pi * ratio)) * (lr - min_lr);
}

std::vector<int64_t> LanguageModelTrainer::draw_starts(uint64_t stream, uint64_t& counter, int64_t count,
                                                       int64_t limit) const {
  const uint64_t key = splitmix64_mix(options_.seed ^ stream);
  std::vector<int64_t> starts(static_cast<size_t>(count));
  for (int64_t& start : starts) start = static_cast<int64_t>(splitmix64(key, counter++) % static_cast<uint64_t>(limit));
  return starts;
}

double LanguageModelTrainer::estimate_loss(const TextDataset& data) {
  const nn::TrainingModeGuard eval(*model_, false);
  const NoGradGuard no_grad;
  const Device device = options_.devices.front();
  Tensor total = Tensor::zeros({}, device);
  for (int64_t i = 0; i < options_.eval_batches; ++i) {
    const Example batch = data.get_batch(draw_starts(kEvalStream, progress_.eval_draws, options_.batch_size, data.size()));
    total = total + token_cross_entropy(model_->forward(batch.data.to(device)), batch.target.to(device));
  }
  return static_cast<double>(total.item()) / static_cast<double>(options_.eval_batches);
}

LanguageModelResult LanguageModelTrainer::fit(const TextDataset& train, const TextDataset& val) {
  const GPTConfig& config = model_->config();
  TANDEM_CHECK(train.block_size() == val.block_size() && train.block_size() <= config.block_size, kTrainer,
               "::fit: the data's block sizes (", train.block_size(), ", ", val.block_size(),
               ") must be equal and at most the model's ", config.block_size);
  TANDEM_CHECK(train.vocab_size() <= config.vocab_size && val.vocab_size() <= config.vocab_size, kTrainer,
               "::fit: the data's vocabulary (", train.vocab_size(), " tokens) is larger than the model's ",
               config.vocab_size);
  const int64_t world = options_.group ? options_.group->size() : 1, rank = options_.group ? options_.group->rank() : 0;
  const int64_t base = options_.batch_size / world, extra = options_.batch_size % world;
  const int64_t first = rank * base + std::min(rank, extra), rows = base + (rank < extra ? 1 : 0);

  if (options_.group) {
    // A process resumed from another checkpoint (or none) would train other batches with other moments.
    const SetupFacts state = {{"state", "step " + std::to_string(steps_done_) + ", windows drawn " +
                                            std::to_string(progress_.train_draws) + " and " +
                                            std::to_string(progress_.eval_draws)}};
    check_same_setup(*options_.group, state, {}, "trainers::LanguageModelTrainer::fit");
  }

  LanguageModelResult result;
  const Clock::time_point start = Clock::now();
  Clock::time_point segment = start;
  const int64_t first_step = steps_done_;
  Tensor last_loss;
  const auto evaluate = [&](int64_t step) {
    if (last_loss.defined()) {
      const float loss = last_loss.item();  // waits for the steps: the segment's time is theirs
      result.train_seconds += seconds_since(segment);
      TANDEM_CHECK(std::isfinite(loss), kTrainer, "::fit: the loss of step ", step, " is ", loss);
    }
    const LanguageModelEvaluation evaluation{step, estimate_loss(train), estimate_loss(val)};
    TANDEM_CHECK(std::isfinite(evaluation.train_loss) && std::isfinite(evaluation.val_loss), kTrainer,
                 "::fit: the evaluation after step ", step, " gave losses ", evaluation.train_loss, " and ",
                 evaluation.val_loss);
    progress_.evaluations.push_back(evaluation);
    if (primary() && on_evaluation_) {
      const double tokens = static_cast<double>((step - first_step) * options_.batch_size * train.block_size());
      on_evaluation_({.evaluation = evaluation,
                      .steps = options_.steps,
                      .lr = lr_at(std::max<int64_t>(step - 1, 0)),
                      .tokens_per_second = tokens > 0 ? tokens / result.train_seconds : 0.0,
                      .seconds = seconds_since(start)});
    }
    segment = Clock::now();
  };
  for (int64_t step = first_step; step < options_.steps; ++step) {
    const double lr = lr_at(step);
    for (size_t d = 0; d < optimizer_->size(); ++d) optimizer_->optimizer(d).set_lr(lr);
    const std::vector<int64_t> starts =
        draw_starts(kTrainStream, progress_.train_draws, options_.batch_size, train.size());
    const Example batch = train.get_batch(std::vector<int64_t>(starts.begin() + first, starts.begin() + first + rows));
    last_loss = step_->step({.features = batch.data, .targets = batch.target, .global_rows = options_.batch_size});
    steps_done_ = step + 1;
    if (step_->captured()) {
      ++result.captured_steps;
    } else if (!step_->warming_up()) {
      result.eager_reason = step_->fallback_reason();
    }
    const int64_t done = steps_done_;
    if ((options_.eval_every > 0 && done % options_.eval_every == 0) || done == options_.steps) evaluate(done);
    if (on_step_end_) on_step_end_(done);
  }
  // A fit resumed at its last step from a checkpoint written before the evaluation there (a longer run's).
  if (progress_.evaluations.empty() || progress_.evaluations.back().step != steps_done_) evaluate(steps_done_);
  result.steps = steps_done_;
  result.tokens = (steps_done_ - first_step) * options_.batch_size * train.block_size();
  result.seconds = seconds_since(start);
  result.tokens_per_second = result.tokens > 0 ? static_cast<double>(result.tokens) / result.train_seconds : 0.0;
  result.evaluations = progress_.evaluations;
  result.train_loss = result.evaluations.back().train_loss;
  result.val_loss = result.evaluations.back().val_loss;
  return result;
}

void LanguageModelTrainer::save_checkpoint(const std::string& path) const {
  if (!primary()) return;
  Checkpoint checkpoint;
  checkpoint.model_state = checkpoint_restore::model_state(*model_);
  checkpoint.optimizer = optimizer_->state_dict();
  checkpoint.step = steps_done_;
  checkpoint.generator = generator_state();
  checkpoint.language_model = progress_;
  checkpoint.setup = setup();
  trainers::save_checkpoint(checkpoint, path);
}

void LanguageModelTrainer::load_checkpoint(const std::string& path) {
  // Note [All-or-nothing resume] in trainer_checkpoint.cpp: every check before the optimizer's load_state_dict, the
  // last check and the first write.
  constexpr const char* kCaller = "trainers::LanguageModelTrainer::load_checkpoint";
  using namespace checkpoint_restore;
  Checkpoint checkpoint = trainers::load_checkpoint(path);
  TANDEM_CHECK(checkpoint.language_model.has_value(), kCaller, ": '", path,
               "' is a Trainer's checkpoint, not a language model's");
  refuse_other_setup(kCaller, path, checkpoint.setup, setup(), {"steps"}, "only steps may change on a resume");
  TANDEM_CHECK(checkpoint.step <= options_.steps, kCaller, ": '", path, "' is at step ", checkpoint.step,
               " but steps is ", options_.steps, "; steps counts all steps (those before a resume too)");
  const std::vector<Expected> slots = model_tensors(*model_);
  const std::vector<Tensor> values = matched_all(kCaller, slots, checkpoint.model_state, path, false);
  check_state_follows_the_steps(kCaller, checkpoint.optimizer, optimizer_->state_dict().kind, checkpoint.step,
                                model_->named_parameters(), path);
  check_undamaged(kCaller, checkpoint, path);
  load_optimizer_state(kCaller, path, [&] { optimizer_->load_state_dict(checkpoint.optimizer); });

  write(slots, values);
  if (distributed_) {
    distributed_->sync_parameters();  // rank 0's values, to every process and replica
  } else {
    replicas_->sync_parameters();
  }
  (distributed_ ? distributed_->replicated() : *replicas_).sync_buffers();
  steps_done_ = checkpoint.step;
  progress_ = *checkpoint.language_model;
  set_generator_state(checkpoint.generator);
}

}  // namespace tandem::trainers
