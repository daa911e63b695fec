#include "language_model_tool.h"

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <optional>

#include "run_devices.h"
#include "tandem/tandem.h"

namespace tandem::train_tool {
namespace {

using namespace trainers;

GPTConfig gpt_config(const Flags& flags, int64_t vocab_size) {
  const LanguageModelFlags& lm = *flags.language_model;
  return {.vocab_size = vocab_size, .block_size = lm.block_size, .n_layer = lm.n_layer, .n_head = lm.n_head,
          .n_embd = lm.n_embd, .dropout = flags.dropout};
}

LanguageModelOptions trainer_options(const Flags& flags, const std::shared_ptr<comm::ProcessGroup>& group) {
  const LanguageModelFlags& lm = *flags.language_model;
  return {.group = group,
          .steps = lm.steps,
          .batch_size = flags.batch_size,
          .lr = flags.lr,
          .min_lr = lm.min_lr,
          .warmup_steps = lm.warmup_steps,
          .lr_decay_steps = lm.lr_decay_steps,
          .weight_decay = flags.weight_decay,
          .max_grad_norm = lm.grad_clip,
          .eval_every = lm.eval_every,
          .eval_batches = lm.eval_batches,
          .precision = flags.precision,
          .capture = flags.capture,
          .seed = flags.seed};
}

void print_banner(const Flags& flags, const TextDataset& train, const TextDataset& val, const GPT& gpt,
                  const LanguageModelTrainer& trainer, const comm::ProcessGroup& group) {
  const GPTConfig& c = gpt.config();
  const LanguageModelOptions& o = trainer.options();
  std::cout << "data: " << *flags.data << ", " << train.vocab_size() << " characters in the vocabulary; train "
            << train.num_tokens() << " tokens, val " << val.num_tokens() << " tokens\n"
            << "model: GPT " << c.n_layer << " layers, " << c.n_head << " heads, width " << c.n_embd << ", context "
            << c.block_size << ", dropout " << exact_text(c.dropout) << " (" << gpt.num_parameters()
            << " parameters) on " << describe_devices(group) << "\n"
            << "adamw: steps " << o.steps << ", global batch " << o.batch_size << ", lr " << o.lr << " (warm-up "
            << o.warmup_steps << " steps, cosine to " << o.min_lr << "), betas " << o.beta1 << ", " << o.beta2
            << ", weight decay " << o.weight_decay << ", clip " << o.max_grad_norm << ", precision "
            << precision_name(flags.precision) << ", seed " << flags.seed << std::endl;
  if (flags.resume) std::cout << "resuming from \"" << *flags.resume << "\" at step " << trainer.step() << std::endl;
}

// --metrics: one JSON line per evaluation, as the table tasks' per epoch (Note [Paced file writes]):
//   {"step":500,"steps":5000,"train_loss":1.62,"val_loss":1.79,"lr":0.00097,"tokens_per_second":1.2e6,"seconds":9.1}
// A resumed run keeps the lines up to its checkpoint's step.
class EvaluationLog {
 public:
  EvaluationLog(const std::string& path, bool resume, int64_t step) : file_(path, "step", "--metrics") {
    file_.begin(resume, step);
  }
  ~EvaluationLog() {
    try {
      file_.end();
    } catch (const std::exception&) {
      // best effort: what was appended is in the file, and the run's error is what matters
    }
  }
  void add(const LanguageModelEvaluationReport& r) {
    const nlohmann::ordered_json line = {{"step", r.evaluation.step},
                                         {"steps", r.steps},
                                         {"train_loss", r.evaluation.train_loss},
                                         {"val_loss", r.evaluation.val_loss},
                                         {"lr", r.lr},
                                         {"tokens_per_second", r.tokens_per_second},
                                         {"seconds", r.seconds}};
    file_.append(r.evaluation.step, line.dump(), r.evaluation.step == r.steps);
  }

 private:
  JsonLinesFile file_;
};

// --plot: the train and val loss of every evaluation of the run (those before a resume too), redrawn atomically
// after each (evaluations are hundreds of steps apart, so the redraws cost nothing beside them).
void draw_losses(const std::string& path, const std::vector<LanguageModelEvaluation>& evaluations) {
  LineChart chart{"loss (cross-entropy)", "step", "nats per character", {}, {}};
  chart.log_y = true;
  std::vector<double> train, val;
  for (const LanguageModelEvaluation& e : evaluations) {
    chart.x.push_back(static_cast<double>(e.step));
    train.push_back(e.train_loss);
    val.push_back(e.val_loss);
  }
  chart.series = {{"train", train, kTrainColour}, {"val", val, kTestColour}};
  write_file_atomically(path, render_svg({chart}), "--plot");
}

std::string describe_steps(const LanguageModelResult& result) {
  if (result.captured_steps == 0) return "steps: eager (" + result.eager_reason + ")";
  std::string text = "steps: captured as a CUDA graph (" + std::to_string(result.captured_steps) + " steps replayed)";
  if (!result.eager_reason.empty()) text += "; eager steps: " + result.eager_reason;
  return text;
}

// `count` characters generated after a newline (or the first token) by the trained model.
std::string sample(GPT& gpt, const TextDataset& data, const LanguageModelFlags& lm) {
  std::vector<int64_t> prompt = {0};
  try {
    prompt = data.encode("\n");
  } catch (const Error&) {
  }
  const Tensor tokens = Tensor::from_vector(prompt, {1, 1}, gpt.device());
  const std::vector<int64_t> ids = gpt.generate(tokens, lm.sample, lm.temperature, lm.top_k).to_vector_as<int64_t>();
  return data.decode(std::vector<int64_t>(ids.begin() + 1, ids.end()));
}

void write_summary(const std::string& path, const LanguageModelResult& result, const GPT& gpt,
                   const LanguageModelTrainer& trainer, const comm::ProcessGroup& group,
                   const std::vector<std::vector<std::string>>& devices_by_rank, const std::string& text,
                   Precision precision) {
  nlohmann::ordered_json summary;
  summary["train_loss"] = result.train_loss;
  summary["val_loss"] = result.val_loss;
  summary["tokens_per_second"] = result.tokens_per_second;
  summary["model_flops_per_second"] =
      gpt_flops_per_token(gpt, gpt.config().block_size) * result.tokens_per_second;  // nanoGPT's estimate
  summary["steps"] = result.steps;
  summary["tokens"] = result.tokens;
  summary["seconds"] = result.seconds;
  summary["train_seconds"] = result.train_seconds;
  summary["evaluations"] = nlohmann::ordered_json::array();
  for (const LanguageModelEvaluation& e : result.evaluations) {
    summary["evaluations"].push_back({{"step", e.step}, {"train_loss", e.train_loss}, {"val_loss", e.val_loss}});
  }
  const GPTConfig& c = gpt.config();
  summary["model"] = {{"vocab_size", c.vocab_size}, {"block_size", c.block_size}, {"n_layer", c.n_layer},
                      {"n_head", c.n_head},         {"n_embd", c.n_embd},         {"dropout", c.dropout},
                      {"parameters", gpt.num_parameters()}};
  summary["precision"] = precision_name(precision);
  summary["devices"] = nlohmann::ordered_json::array();
  for (const Device& device : trainer.options().devices) summary["devices"].push_back(device.str());
  summary["world_size"] = group.size();
  summary["rank_devices"] = devices_by_rank;
  summary["step_mode"] = result.captured_steps > 0 ? "captured" : "eager";
  summary["captured_steps"] = result.captured_steps;
  if (!result.eager_reason.empty()) summary["eager_reason"] = result.eager_reason;
  if (!text.empty()) summary["sample"] = text;
  write_file_atomically(path, summary.dump(2) + "\n", "--summary-json");
}

void resume(LanguageModelTrainer& trainer, const std::string& path) {
  try {
    trainer.load_checkpoint(path);
  } catch (const SetupMismatch& e) {
    const bool schedule = std::string_view(e.what()).find("lr_decay_steps: ") != std::string_view::npos;
    if (!schedule) throw;
    throw SetupMismatch(std::string(e.what()) +
                        "; give --lr-decay-steps (the same in both runs) to resume to more steps on one schedule");
  }
}

}  // namespace

int train_language_model(const Flags& flags, const std::shared_ptr<comm::ProcessGroup>& group) {
  const bool primary = group->rank() == 0;
  const LanguageModelFlags& lm = *flags.language_model;
  const TextDataset train(*flags.data, lm.block_size);
  const TextDataset val(*flags.data, lm.block_size, {.split = TextSplit::Validation});

  manual_seed(flags.seed);
  const std::shared_ptr<GPT> gpt = make_gpt(gpt_config(flags, train.vocab_size()));
  LanguageModelTrainer trainer(gpt, trainer_options(flags, group));
  if (flags.resume) resume(trainer, *flags.resume);
  if (primary && !flags.quiet) print_banner(flags, train, val, *gpt, trainer, *group);
  std::optional<EvaluationLog> log;
  if (primary && flags.metrics) log.emplace(*flags.metrics, flags.resume.has_value(), trainer.step());
  trainer.on_evaluation([&](const LanguageModelEvaluationReport& r) {
    if (!flags.quiet) {
      const LanguageModelEvaluation& e = r.evaluation;
      std::printf("step %lld: train loss %.4f, val loss %.4f\n", static_cast<long long>(e.step), e.train_loss,
                  e.val_loss);
      std::fflush(stdout);
    }
    if (log) log->add(r);
    if (flags.plot) draw_losses(*flags.plot, trainer.evaluations());
  });
  if (flags.checkpoint) {
    trainer.on_step_end([&](int64_t step) {
      if (step % flags.checkpoint_every == 0 || step == lm.steps) trainer.save_checkpoint(*flags.checkpoint);
    });
  }
  const LanguageModelResult result = trainer.fit(train, val);
  if (primary && flags.plot) draw_losses(*flags.plot, result.evaluations);  // a resume with no step left too
  const std::vector<std::vector<std::string>> devices_by_rank = rank_devices(*group);
  if (!primary) return 0;
  std::printf("done: %lld steps in %.3f s on %s, %.0f tokens/s\n", static_cast<long long>(result.steps),
              result.seconds, describe_devices(*group).c_str(), result.tokens_per_second);
  std::printf("%s\n", describe_steps(result).c_str());
  std::printf("train loss %.4f, val loss %.4f\n", result.train_loss, result.val_loss);
  const std::string text = lm.sample > 0 ? sample(*gpt, train, lm) : "";
  if (!text.empty()) std::printf("sample:\n%s\n", text.c_str());
  std::fflush(stdout);
  if (flags.summary_json) {
    write_summary(*flags.summary_json, result, *gpt, trainer, *group, devices_by_rank, text, flags.precision);
  }
  return 0;
}

}  // namespace tandem::train_tool
