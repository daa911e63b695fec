#include "language_model_tool.h"

#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>

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

}  // namespace

int train_language_model(const Flags& flags, const std::shared_ptr<comm::ProcessGroup>& group) {
  const bool primary = group->rank() == 0;
  const LanguageModelFlags& lm = *flags.language_model;
  const TextDataset train(*flags.data, lm.block_size);
  const TextDataset val(*flags.data, lm.block_size, {.split = TextSplit::Validation});

  manual_seed(flags.seed);
  const std::shared_ptr<GPT> gpt = make_gpt(gpt_config(flags, train.vocab_size()));
  LanguageModelTrainer trainer(gpt, trainer_options(flags, group));
  if (primary && !flags.quiet) {
    print_banner(flags, train, val, *gpt, trainer, *group);
    trainer.on_evaluation([](const LanguageModelEvaluation& e) {
      std::printf("step %lld: train loss %.4f, val loss %.4f\n", static_cast<long long>(e.step), e.train_loss,
                  e.val_loss);
      std::fflush(stdout);
    });
  }
  const LanguageModelResult result = trainer.fit(train, val);
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
