#include "flags.h"

#include <CLI/CLI.hpp>
#include <algorithm>
#include <charconv>
#include <chrono>
#include <cmath>
#include <filesystem>
#include <iostream>
#include <limits>
#include <set>
#include <sstream>

#include "tandem/core/atomic_file.h"
#include "tandem/core/build_info.h"
#include "tandem/core/error.h"
#include "tandem/trainers/process_devices.h"
#include "tandem/trainers/trainer.h"

namespace tandem::train_tool {
namespace {

// The seed net is Linear(10, 20) -> Linear(20, 1); the last 20% of the rows are the test set.
constexpr int64_t kHidden = 20;
constexpr double kTestFraction = 0.2;

// What a flag left out means, per task. Regression keeps the seed net's SGD. Classification's defaults train the
// digits data (data/README.md) to test accuracy 0.93 or more on its last 20% of rows (docs/tandem-train.md).
// Their lr and weight decay go with their optimizer; another optimizer gets its own defaults (default_lr).
struct TaskDefaults {
  int64_t epochs;
  Optimizer optimizer;
  double lr;
  double weight_decay;
  const char* layers;
  const char* activation;
  const char* lr_schedule;
};
constexpr TaskDefaults kRegressionDefaults{100, Optimizer::SGD, 0.01, 0.0, "20", "none", "none"};
constexpr TaskDefaults kClassificationDefaults{50, Optimizer::AdamW, 0.002, 1.0, "512,256", "relu", "cosine"};
// --model cnn (classification only): make_cnn's net on the raw pixels (not standardized), trained on random crops of
// them padded by one pixel, reaches test accuracy 0.97 or more on the digits split (docs/tandem-train.md).
constexpr TaskDefaults kCnnDefaults{12, Optimizer::AdamW, 0.001, 0.01, "", "", "cosine"};
constexpr int64_t kCnnCropPadding = 1;

// The learning rate and weight decay an optimizer gets unless --lr / --weight-decay say otherwise: the task's when it
// is the task's optimizer, else PyTorch's defaults for Adam and AdamW and the seed net's lr for SGD.
constexpr double kAdamLr = 1e-3;            // PyTorch's Adam and AdamW lr
constexpr double kAdamWWeightDecay = 1e-2;  // PyTorch's AdamW weight_decay
double default_lr(Optimizer optimizer, const TaskDefaults& task) {
  if (optimizer == task.optimizer) return task.lr;
  return optimizer == Optimizer::SGD ? kRegressionDefaults.lr : kAdamLr;
}
double default_weight_decay(Optimizer optimizer, const TaskDefaults& task) {
  if (optimizer == task.optimizer) return task.weight_decay;
  return optimizer == Optimizer::AdamW ? kAdamWWeightDecay : 0.0;
}

void check(bool ok, const std::string& message) {
  if (!ok) throw UsageError(message);
}

std::string text(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

// The bounds of the integer flags: far above any run this tool is for, and low enough that nothing derived from them
// (steps, tensor sizes) can overflow.
constexpr int64_t kMaxEpochs = 1'000'000'000;
constexpr int64_t kMaxBatchSize = int64_t{1} << 31;
constexpr int64_t kMaxHidden = int64_t{1} << 24;
constexpr int64_t kMaxTimeoutSeconds = 7 * 24 * 3600;

// A decimal integer in [min, max]: no sign unless min < 0, no hex, no exponent, no clamping.
template <typename Integer>
Integer parse_integer(const char* flag, const std::string& text, Integer min, Integer max) {
  Integer value{};
  const char* first = text.data();
  const char* last = text.data() + text.size();
  const auto [end, error] = std::from_chars(first, last, value);
  const bool in_range = error == std::errc() && end == last && !text.empty() && value >= min && value <= max;
  check(in_range, std::string(flag) + " must be an integer in [" + std::to_string(min) + ", " + std::to_string(max) +
                      "], got \"" + excerpt(text) + "\"");
  return value;
}

// A finite decimal number (std::from_chars's general format: an optional minus, digits, point and exponent) and
// nothing else: no hex, no inf or nan, no spaces; CLI11 would take all of them.
double parse_real(const char* flag, const std::string& text) {
  double value = 0.0;
  const char* first = text.data();
  const char* last = text.data() + text.size();
  const auto [end, error] = std::from_chars(first, last, value, std::chars_format::general);
  check(!text.empty() && error == std::errc() && end == last && std::isfinite(value),
        std::string(flag) + " must be a finite decimal number, got \"" + excerpt(text) + "\"");
  return value;
}

void validate(const Flags& flags) {
  check(flags.lr > 0.0 && std::isfinite(flags.lr), "--lr must be a positive number, got " + text(flags.lr));
  check(flags.momentum >= 0.0 && flags.momentum < 1.0, "--momentum must lie in [0, 1), got " + text(flags.momentum));
  check(flags.dropout >= 0.0 && flags.dropout < 1.0, "--dropout must lie in [0, 1), got " + text(flags.dropout));
  check(flags.weight_decay >= 0.0 && std::isfinite(flags.weight_decay),
        "--weight-decay must be a number >= 0, got " + text(flags.weight_decay));
  check(flags.test_fraction >= 0.0 && flags.test_fraction < 1.0,
        "--test-fraction must lie in [0, 1), got " + text(flags.test_fraction));
  // In epochs, or a language model's steps.
  const bool steps = flags.language_model.has_value();
  const int64_t most = steps ? flags.language_model->steps : flags.epochs;
  check(flags.checkpoint_every <= most, std::string("--checkpoint-every must be at most ") +
                                            (steps ? "--steps (" : "--epochs (") + std::to_string(most) + "), got " +
                                            std::to_string(flags.checkpoint_every));
  check(flags.allow_change.empty() || flags.resume.has_value(), "--allow-change needs --resume");
}

Optimizer parse_optimizer(const std::string& text) {
  for (Optimizer optimizer : {Optimizer::SGD, Optimizer::Adam, Optimizer::AdamW}) {
    if (text == to_string(optimizer)) return optimizer;
  }
  throw UsageError("--optimizer must be sgd, adam or adamw, got \"" + excerpt(text) + "\"");
}

trainers::Task parse_task(const std::string& text) {
  check(text == "regression" || text == "classification",
        "--task must be regression, classification or language-model, got \"" + excerpt(text) + "\"");
  return text == "regression" ? trainers::Task::Regression : trainers::Task::Classification;
}

// "a,b,c": names, none empty, none repeated.
std::vector<std::string> parse_names(const char* flag, const std::string& text) {
  std::vector<std::string> names;
  std::stringstream list(text);
  for (std::string name; std::getline(list, name, ',');) {
    check(!name.empty(),
          std::string(flag) + " takes comma-separated column names, got \"" + excerpt(text) + "\" with an empty name");
    check(std::find(names.begin(), names.end(), name) == names.end(),
          std::string(flag) + " names \"" + excerpt(name) + "\" twice");
    names.push_back(name);
  }
  check(!names.empty() && text.back() != ',',
        std::string(flag) + " takes comma-separated column names, got \"" + excerpt(text) + "\"");
  return names;
}

// "128,64": hidden widths, each in [1, kMaxHidden], at most kMaxLayers of them.
std::vector<int64_t> parse_layers(const char* flag, const std::string& text) {
  constexpr size_t kMaxLayers = 64;
  std::vector<int64_t> widths;
  std::stringstream list(text);
  for (std::string width; std::getline(list, width, ',');) {
    widths.push_back(parse_integer<int64_t>(flag, width, 1, kMaxHidden));
    check(widths.size() <= kMaxLayers, std::string(flag) + " takes at most " + std::to_string(kMaxLayers) +
                                           " widths, got \"" + excerpt(text) + "\"");
  }
  check(!widths.empty() && text.back() != ',', std::string(flag) +
                                                   " takes comma-separated widths such as 128,64, "
                                                   "got \"" +
                                                   excerpt(text) + "\"");
  return widths;
}

// "C,H,W": three sizes, each in [1, kMaxHidden].
Shape parse_image_shape(const std::string& text) {
  Shape sizes;
  std::stringstream list(text);
  for (std::string size; std::getline(list, size, ',') && sizes.size() < 4;) {
    sizes.push_back(parse_integer<int64_t>("--image-shape", size, 1, kMaxHidden));
  }
  check(sizes.size() == 3 && text.back() != ',',
        "--image-shape takes C,H,W (channels, height, width) such as 1,8,8, got \"" + excerpt(text) + "\"");
  return sizes;
}

// One finite number per channel, comma-separated; --normalize-std's all positive.
std::vector<double> parse_channel_values(const char* flag, const std::string& text, int64_t channels, bool positive) {
  std::vector<double> values;
  std::stringstream list(text);
  for (std::string value; std::getline(list, value, ',') && static_cast<int64_t>(values.size()) <= channels;) {
    values.push_back(parse_real(flag, value));
    check(!positive || values.back() > 0.0,
          std::string(flag) + " must hold positive values, got \"" + excerpt(value) + "\"");
  }
  check(static_cast<int64_t>(values.size()) == channels && !text.empty() && text.back() != ',',
        std::string(flag) + " takes one value per channel of --image-shape (" + std::to_string(channels) +
            ", comma-separated), got \"" + excerpt(text) + "\"");
  return values;
}

std::set<std::string> parse_allowed_changes(const std::string& text) {
  std::set<std::string> names;
  std::stringstream list(text);
  for (std::string name; std::getline(list, name, ',');) {
    check(name == "lr" || name == "epochs",
          "--allow-change takes lr and/or epochs (comma-separated), got \"" + excerpt(name) + "\"");
    names.insert(name);
  }
  return names;
}

// Refuses an output path that a write would refuse (see check_writable) before any training time is spent.
void check_output(const char* flag, const std::optional<std::string>& path) {
  if (!path) return;
  try {
    check_writable(*path, flag);
  } catch (const Error& e) {
    throw UsageError(e.what());
  }
}

bool same_file(const std::string& a, const std::string& b) {
  std::error_code error;
  if (std::filesystem::equivalent(a, b, error)) return true;  // both exist: links and hard links included
  std::error_code other_error;
  const std::filesystem::path first = std::filesystem::weakly_canonical(a, error);
  const std::filesystem::path second = std::filesystem::weakly_canonical(b, other_error);
  return !error && !other_error && first == second;
}

// Refuses two flags that name one file where a write would destroy what the other reads or writes: --data and every
// output, and the outputs among themselves. --resume may name the --checkpoint that the run goes on writing.
void check_distinct_files(const Flags& flags) {
  const std::pair<const char*, const std::optional<std::string>*> outputs[] = {{"--checkpoint", &flags.checkpoint},
                                                                               {"--metrics", &flags.metrics},
                                                                               {"--summary-json", &flags.summary_json},
                                                                               {"--plot", &flags.plot}};
  const std::pair<const char*, const std::optional<std::string>*> inputs[] = {{"--data", &flags.data},
                                                                              {"--resume", &flags.resume}};
  const auto refuse_same = [](const char* first, const std::string& a, const char* second, const std::string& b) {
    check(!same_file(a, b), std::string(first) + " and " + second + " name the same file ('" + excerpt(a) + "', '" +
                                excerpt(b) + "'); expected different files");
  };
  for (size_t i = 0; i < std::size(outputs); ++i) {
    const auto& [flag, path] = outputs[i];
    if (!*path) continue;
    for (size_t j = i + 1; j < std::size(outputs); ++j) {
      if (*outputs[j].second) refuse_same(flag, **path, outputs[j].first, **outputs[j].second);
    }
    for (const auto& [input_flag, input] : inputs) {
      const bool continues = std::string_view(input_flag) == "--resume" && std::string_view(flag) == "--checkpoint";
      if (*input && !continues) refuse_same(input_flag, **input, flag, **path);
    }
  }
}

// The language model's flags as given (text, parsed in parse_language_model) and their options.
struct LanguageModelTexts {
  std::string n_layer, n_head, n_embd, block_size, steps, eval_every, eval_batches, warmup_steps, lr_decay_steps,
      min_lr, grad_clip, sample, temperature, top_k;
  std::vector<CLI::Option*> options;
  CLI::Option* lr_decay_steps_option = nullptr;
};

// Defaults of --task language-model for the flags it shares: nanoGPT's character-level Shakespeare configuration
// (config/train_shakespeare_char.py), bf16 products on GPUs as its autocast.
constexpr double kLanguageModelLr = 1e-3;
constexpr double kLanguageModelWeightDecay = 0.1;
constexpr double kLanguageModelDropout = 0.2;

void add_language_model_options(CLI::App& app, LanguageModelTexts& t) {
  const LanguageModelFlags d;
  const auto add = [&](const char* name, std::string& text, const std::string& fallback, const std::string& help) {
    text = fallback;
    t.options.push_back(app.add_option(name, text, "language-model: " + help)->capture_default_str());
  };
  add("--n-layer", t.n_layer, std::to_string(d.n_layer), "transformer blocks");
  add("--n-head", t.n_head, std::to_string(d.n_head), "attention heads per block");
  add("--n-embd", t.n_embd, std::to_string(d.n_embd), "width (a multiple of --n-head)");
  add("--block-size", t.block_size, std::to_string(d.block_size), "context length in tokens");
  add("--steps", t.steps, std::to_string(d.steps), "optimizer steps");
  add("--eval-every", t.eval_every, std::to_string(d.eval_every), "steps between evaluations (0: after the last only)");
  add("--eval-batches", t.eval_batches, std::to_string(d.eval_batches), "batches per split per evaluation");
  add("--warmup-steps", t.warmup_steps, std::to_string(d.warmup_steps), "steps of linear learning-rate warm-up");
  t.lr_decay_steps_option = app.add_option(
      "--lr-decay-steps", t.lr_decay_steps,
      "language-model: the step the cosine reaches --min-lr at (default: --steps; give it to resume to more steps)");
  t.options.push_back(t.lr_decay_steps_option);
  add("--min-lr", t.min_lr, text(d.min_lr), "the learning rate the cosine decays to");
  add("--grad-clip", t.grad_clip, text(d.grad_clip), "clip the gradients' total norm to this (0: off)");
  add("--sample", t.sample, std::to_string(d.sample), "characters to generate after training (0: none)");
  add("--temperature", t.temperature, text(d.temperature), "sampling temperature");
  add("--top-k", t.top_k, std::to_string(*d.top_k), "sample among the k likeliest tokens (0: all)");
}

LanguageModelFlags parse_language_model(const LanguageModelTexts& t) {
  constexpr int64_t kMaxWidth = int64_t{1} << 16;
  constexpr int64_t kMaxSteps = int64_t{1} << 40;
  LanguageModelFlags f;
  f.n_layer = parse_integer<int64_t>("--n-layer", t.n_layer, 1, 1024);
  f.n_head = parse_integer<int64_t>("--n-head", t.n_head, 1, 1024);
  f.n_embd = parse_integer<int64_t>("--n-embd", t.n_embd, 1, kMaxWidth);
  check(f.n_embd % f.n_head == 0, "--n-embd (" + std::to_string(f.n_embd) + ") must be a multiple of --n-head (" +
                                      std::to_string(f.n_head) + ")");
  f.block_size = parse_integer<int64_t>("--block-size", t.block_size, 1, kMaxWidth);
  f.steps = parse_integer<int64_t>("--steps", t.steps, 1, kMaxSteps);
  f.eval_every = parse_integer<int64_t>("--eval-every", t.eval_every, 0, kMaxSteps);
  f.eval_batches = parse_integer<int64_t>("--eval-batches", t.eval_batches, 1, kMaxSteps);
  f.warmup_steps = parse_integer<int64_t>("--warmup-steps", t.warmup_steps, 0, kMaxSteps);
  if (t.lr_decay_steps_option->count() > 0) {
    f.lr_decay_steps = parse_integer<int64_t>("--lr-decay-steps", t.lr_decay_steps, f.warmup_steps, kMaxSteps);
  }
  f.min_lr = parse_real("--min-lr", t.min_lr);
  f.grad_clip = parse_real("--grad-clip", t.grad_clip);
  check(f.min_lr >= 0.0, "--min-lr must be >= 0, got " + text(f.min_lr));
  check(f.grad_clip >= 0.0, "--grad-clip must be >= 0, got " + text(f.grad_clip));
  f.sample = parse_integer<int64_t>("--sample", t.sample, 0, int64_t{1} << 20);
  f.temperature = parse_real("--temperature", t.temperature);
  check(f.temperature > 0.0, "--temperature must be positive, got " + text(f.temperature));
  const int64_t top_k = parse_integer<int64_t>("--top-k", t.top_k, 0, int64_t{1} << 31);
  f.top_k = top_k == 0 ? std::nullopt : std::optional<int64_t>(top_k);
  return f;
}

// Runs a tandem parser of a flag's text, turning its Error into a UsageError that names the flag.
template <class Parse>
auto parse_value(const char* flag, Parse parse) {
  try {
    return parse();
  } catch (const Error& e) {
    throw UsageError(std::string(flag) + ": " + e.what());
  }
}

}  // namespace

std::string to_string(Optimizer optimizer) {
  switch (optimizer) {
    case Optimizer::SGD:
      return "sgd";
    case Optimizer::Adam:
      return "adam";
    case Optimizer::AdamW:
      return "adamw";
  }
  return "?";
}

ParsedFlags parse_flags(int argc, char** argv) {
  ParsedFlags parsed;
  Flags& flags = parsed.flags;
  const trainers::TrainerOptions defaults;
  flags.batch_size = defaults.batch_size;
  // Numbers are read as text and parsed here: CLI11 would clamp out-of-range integers and take hex, inf, nan and
  // leading spaces.
  std::string epochs;
  std::string lr;
  std::string momentum = text(defaults.sgd.momentum);
  std::string weight_decay_text;
  std::string dropout = text(0.0);
  std::string test_fraction = text(kTestFraction);
  std::string batch_size = std::to_string(flags.batch_size);
  std::string accumulate = std::to_string(defaults.accumulate_steps);
  std::string zero = "0";
  std::string hidden;
  std::string layers;
  std::string task = "regression";
  std::string features;
  std::string optimizer;
  std::string lr_schedule;
  std::string seed = "0";
  std::string checkpoint_every = "1";
  std::string allow_change;
  std::string devices = "all";
  std::string timeout =
      std::to_string(std::chrono::duration_cast<std::chrono::seconds>(comm::ProcessGroupOptions{}.timeout).count());
  std::string missing = "error";
  std::string delimiter = ",";
  std::string standardize = "on";
  std::string activation;
  std::string model = "mlp";
  std::string image_shape;
  std::string crop_padding;
  std::string normalize_mean, normalize_std;
  std::string precision = "fp32";
  std::string capture = "on";
  bool no_capture = false;

  CLI::App app(
      "Trains a small regression net or classifier, data parallel. With no flags: Linear(10,20) -> Linear(20,1) "
      "with SGD on the built-in diabetes data, on every GPU (else on virtual CPU devices cpu:0 and cpu:1).",
      "tandem-train");
  CLI::Option* data_option =
      app.add_option("--data", flags.data,
                     "CSV file: a header line, then numeric rows (default: built-in diabetes); with --task "
                     "language-model, a text file (required)")
          ->check(CLI::ExistingFile);
  app.add_option("--missing", missing,
                 "Cells that are empty or NA, N/A, NaN, nan, null, NULL, None, ?: error (name the cell) or drop-row")
      ->capture_default_str();
  app.add_option("--delimiter", delimiter, "The character between a CSV file's fields: one character, or tab")
      ->capture_default_str();
  app.add_option("--standardize", standardize,
                 "on|off: standardize each feature (and a regression's target) with the training set's statistics "
                 "(default: off for --model cnn)")
      ->capture_default_str();
  app.add_option("--task", task,
                 "regression, classification (the target holds integer class labels; at most 10000 classes) or "
                 "language-model (a GPT on the text file --data, characters as tokens)")
      ->capture_default_str();
  app.add_option("--target", flags.target, "Target column name (default: the last column)");
  CLI::Option* features_option =
      app.add_option("--features", features, "Feature columns by name, comma-separated (default: all but the target)");
  app.add_option("--devices", devices,
                 "This process's devices: cuda:0,cuda:1 or cpu:0,cpu:1,cpu:2 or all (under a launcher: this "
                 "process's share of the machine's GPUs)")
      ->capture_default_str();
  app.add_option("--timeout", timeout,
                 "Under a launcher: seconds a collective may take before the whole job ends with an error")
      ->capture_default_str();
  // The defaults in the help come from the tables above, their one home.
  const TaskDefaults& r = kRegressionDefaults;
  const TaskDefaults& c = kClassificationDefaults;
  CLI::Option* epochs_option =
      app.add_option("--epochs", epochs,
                     "Epochs in all (a resumed run continues up to this; default: " + std::to_string(r.epochs) +
                         " for regression, " + std::to_string(c.epochs) + " for classification, " +
                         std::to_string(kCnnDefaults.epochs) + " for --model cnn)");
  app.add_option("--batch-size", batch_size, "Global batch size (split over the devices)")->capture_default_str();
  app.add_option("--accumulate", accumulate,
                 "Batches per optimizer step (gradient accumulation: one step on --accumulate times --batch-size rows)")
      ->capture_default_str();
  app.add_option("--zero", zero,
                 "ZeRO stage: 0 replicates the optimizer state on every device, 1 shards it over every device of "
                 "every process, 2 also shards the reduced gradients")
      ->capture_default_str();
  CLI::Option* optimizer_option =
      app.add_option("--optimizer", optimizer,
                     "sgd|adam|adamw (default: " + to_string(r.optimizer) + " for regression, " +
                         to_string(c.optimizer) + " for classification)");
  CLI::Option* lr_option = app.add_option(
      "--lr", lr,
      "Learning rate (default: " + text(r.lr) + " for regression's " + to_string(r.optimizer) + ", " + text(c.lr) +
          " for classification's " + to_string(c.optimizer) + "; other optimizers: " + text(kRegressionDefaults.lr) +
          " for sgd, " + text(kAdamLr) + " for adam/adamw)");
  CLI::Option* momentum_option = app.add_option("--momentum", momentum, "SGD momentum")->capture_default_str();
  CLI::Option* weight_decay_option =
      app.add_option("--weight-decay", weight_decay_text,
                     "Weight decay (default: " + text(c.weight_decay) + " for classification's " +
                         to_string(c.optimizer) + "; otherwise " + text(kAdamWWeightDecay) + " for adamw, else 0)");
  CLI::Option* schedule_option =
      app.add_option("--lr-schedule", lr_schedule,
                     "none, step:S:GAMMA, cosine, warmup:N, warmup:N+cosine or warmup:N+step:S:GAMMA (per epoch; "
                     "default: " +
                         std::string(r.lr_schedule) + " for regression, " + c.lr_schedule + " for classification)");
  CLI::Option* hidden_option = app.add_option("--hidden", hidden, "Width of the one hidden layer (--layers N)");
  CLI::Option* layers_option =
      app.add_option("--layers", layers,
                     "Hidden widths, comma-separated: 128,64 (default: " + std::string(r.layers) + " for regression, " +
                         c.layers + " for classification)")
          ->excludes(hidden_option);
  CLI::Option* activation_option =
      app.add_option("--activation", activation,
                     "none|relu|tanh after each hidden layer (default: " + std::string(r.activation) +
                         " for regression, " + c.activation + " for classification)");
  CLI::Option* model_option =
      app.add_option("--model", model,
                     "mlp (Linear layers: --layers, --activation) or cnn (--task classification of images: two 3x3 "
                     "convolutions, a 2x2 max pooling and two Linear layers, trainers::make_cnn; defaults: " +
                         to_string(kCnnDefaults.optimizer) + " lr " + text(kCnnDefaults.lr) + ", weight decay " +
                         text(kCnnDefaults.weight_decay) + ", " + kCnnDefaults.lr_schedule + ")")
          ->capture_default_str();
  CLI::Option* image_shape_option = app.add_option(
      "--image-shape", image_shape, "cnn: C,H,W of each row's image, its features in row-major order (required)");
  CLI::Option* crop_padding_option =
      app.add_option("--crop-padding", crop_padding,
                     "cnn: train on random crops of the images padded with this many zeros per side (default: " +
                         std::to_string(kCnnCropPadding) + "; 0: none)");
  CLI::Option* flip_option = app.add_flag(
      "--flip", flags.horizontal_flip,
      "cnn: train on images flipped left to right with probability 1/2 (torchvision's RandomHorizontalFlip)");
  CLI::Option* normalize_mean_option = app.add_option(
      "--normalize-mean", normalize_mean,
      "cnn: per-channel means of torchvision's Normalize(mean, std), applied after the crops and flips and to every "
      "evaluation (with --normalize-std; default: none)");
  CLI::Option* normalize_std_option = app.add_option(
      "--normalize-std", normalize_std, "cnn: per-channel standard deviations (positive) of the normalization");
  app.add_option("--dropout", dropout,
                 "Dropout rate after each hidden layer's activation, in [0, 1) (0: no Dropout layers)")
      ->capture_default_str();
  app.add_option("--precision", precision,
                 "fp32|tf32|bf16: how the layers multiply (bf16: bfloat16 products, float32 weights, gradients and "
                 "optimizer state)")
      ->capture_default_str();
  CLI::Option* capture_option =
      app.add_option("--capture", capture,
                     "on|off: on CUDA devices of one process, run each training step as one replayed CUDA graph "
                     "(off: eager steps; the results agree to float rounding)")
          ->capture_default_str();
  app.add_flag("--no-capture", no_capture, "The same as --capture off")->excludes(capture_option);
  app.add_option("--seed", seed, "Seed of the initialization and of the shuffling")->capture_default_str();
  app.add_option("--test-fraction", test_fraction, "The last fraction of the rows is the test set")
      ->capture_default_str();
  CLI::Option* checkpoint = app.add_option("--checkpoint", flags.checkpoint, "Write checkpoints to this path");
  CLI::Option* checkpoint_every_option =
      app.add_option("--checkpoint-every", checkpoint_every,
                     "Checkpoint every N epochs (and after the last); language-model: every N steps (default: "
                     "--eval-every)")
          ->capture_default_str()
          ->needs(checkpoint);
  CLI::Option* resume = app.add_option("--resume", flags.resume, "Continue from this checkpoint (of the same setup)")
                            ->check(CLI::ExistingFile);
  app.add_option("--allow-change", allow_change,
                 "Let the resumed run change these (comma-separated): lr (epochs, and a language model's steps, may "
                 "always change)")
      ->needs(resume);
  app.add_option("--metrics", flags.metrics,
                 "One JSON line per epoch, language-model: per evaluation (a resumed run keeps the lines up to its "
                 "checkpoint)");
  app.add_option("--summary-json", flags.summary_json, "Write the final metrics as JSON to this file");
  app.add_option("--plot", flags.plot,
                 "Draw train/test loss and the metric per epoch (language-model: train/val loss per evaluation) as "
                 "an SVG image in this file");
  app.add_flag("--quiet", flags.quiet, "No per-epoch progress (the final summary is still printed)");
  LanguageModelTexts language_model;
  add_language_model_options(app, language_model);
  app.set_version_flag(
      "--version", [] { return "tandem-train: " + build_summary(); },
      "Print the version and how tandem was built (CUDA and its architectures, NCCL, MPI), then exit");

  try {
    app.parse(argc, argv);
    flags.batch_size = parse_integer<int64_t>("--batch-size", batch_size, 1, kMaxBatchSize);
    flags.accumulate_steps = parse_integer<int64_t>("--accumulate", accumulate, 1, kMaxBatchSize);
    flags.zero_stage = parse_integer<int>("--zero", zero, 0, 2);
    const bool is_language_model = task == "language-model";
    flags.task = is_language_model ? trainers::Task::Regression : parse_task(task);
    const TaskDefaults& defaults =
        flags.task == trainers::Task::Regression ? kRegressionDefaults : kClassificationDefaults;
    // A flag given with an empty value is an error, not its default: only a flag left out takes the default.
    const auto given = [](const CLI::Option* option) { return option->count() > 0; };
    if (is_language_model) {
      // The flags of the tables' tasks have no meaning for a language model: refused rather than ignored.
      for (const CLI::Option* option :
           {epochs_option, features_option, optimizer_option, momentum_option, schedule_option, hidden_option,
            layers_option, activation_option, model_option, image_shape_option, crop_padding_option, flip_option,
            normalize_mean_option, normalize_std_option}) {
        check(!given(option), option->get_name() + " does not apply to --task language-model");
      }
      for (const char* name : {"--target", "--missing", "--delimiter", "--standardize", "--test-fraction",
                               "--allow-change", "--accumulate", "--zero"}) {
        check(app.get_option(name)->count() == 0, std::string(name) + " does not apply to --task language-model");
      }
      check(given(data_option), "--task language-model needs --data, a text file");
      flags.language_model = parse_language_model(language_model);
      flags.optimizer = Optimizer::AdamW;
      flags.lr = given(lr_option) ? parse_real("--lr", lr) : kLanguageModelLr;
      flags.weight_decay =
          given(weight_decay_option) ? parse_real("--weight-decay", weight_decay_text) : kLanguageModelWeightDecay;
      flags.dropout =
          app.get_option("--dropout")->count() > 0 ? parse_real("--dropout", dropout) : kLanguageModelDropout;
      flags.epochs = 1;
    } else {
      for (const CLI::Option* option : language_model.options) {
        check(!given(option), option->get_name() + " applies to --task language-model only");
      }
      check(model == "mlp" || model == "cnn", "--model must be mlp or cnn, got \"" + excerpt(model) + "\"");
      const bool cnn = model == "cnn";
      if (cnn) {
        check(flags.task == trainers::Task::Classification, "--model cnn needs --task classification");
        for (const CLI::Option* option : {hidden_option, layers_option, activation_option}) {
          check(!given(option), option->get_name() + " does not apply to --model cnn (its sizes are make_cnn's)");
        }
        check(given(image_shape_option), "--model cnn needs --image-shape C,H,W (such as 1,8,8)");
        flags.model = Flags::Model::CNN;
        flags.image_shape = parse_image_shape(image_shape);
        const int64_t largest = std::max(flags.image_shape[1], flags.image_shape[2]);
        flags.crop_padding = given(crop_padding_option)
                                 ? parse_integer<int64_t>("--crop-padding", crop_padding, 0, largest)
                                 : kCnnCropPadding;
        check(given(normalize_mean_option) == given(normalize_std_option),
              "--normalize-mean and --normalize-std go together: give both or neither");
        if (given(normalize_mean_option)) {
          const int64_t channels = flags.image_shape[0];
          flags.normalize_mean = parse_channel_values("--normalize-mean", normalize_mean, channels, false);
          flags.normalize_std = parse_channel_values("--normalize-std", normalize_std, channels, true);
        }
        if (app.get_option("--standardize")->count() == 0) standardize = "off";
      } else {
        for (const CLI::Option* option :
             {image_shape_option, crop_padding_option, flip_option, normalize_mean_option, normalize_std_option}) {
          check(!given(option), option->get_name() + " applies to --model cnn only");
        }
      }
      const TaskDefaults& task_defaults = cnn ? kCnnDefaults : defaults;
      flags.epochs =
          given(epochs_option) ? parse_integer<int64_t>("--epochs", epochs, 1, kMaxEpochs) : task_defaults.epochs;
      if (given(features_option)) flags.features = parse_names("--features", features);
      flags.optimizer = given(optimizer_option) ? parse_optimizer(optimizer) : task_defaults.optimizer;
      flags.lr = given(lr_option) ? parse_real("--lr", lr) : default_lr(flags.optimizer, task_defaults);
      flags.weight_decay = given(weight_decay_option) ? parse_real("--weight-decay", weight_decay_text)
                                                      : default_weight_decay(flags.optimizer, task_defaults);
      flags.momentum = parse_real("--momentum", momentum);
      flags.dropout = parse_real("--dropout", dropout);
      flags.test_fraction = parse_real("--test-fraction", test_fraction);
      check(!given(momentum_option) || flags.optimizer == Optimizer::SGD,
            "--momentum applies to --optimizer sgd only, got --optimizer " + to_string(flags.optimizer));
      if (!cnn) {
        flags.layers = given(hidden_option)
                           ? std::vector<int64_t>{parse_integer<int64_t>("--hidden", hidden, 1, kMaxHidden)}
                           : parse_layers("--layers", given(layers_option) ? layers : defaults.layers);
      }
      if (!given(activation_option)) activation = cnn ? "none" : defaults.activation;
      flags.lr_schedule = given(schedule_option) ? lr_schedule : task_defaults.lr_schedule;
    }
    check(capture == "on" || capture == "off", "--capture must be on or off, got \"" + excerpt(capture) + "\"");
    flags.capture = capture == "on" && !no_capture;
    flags.seed = parse_integer<uint64_t>("--seed", seed, 0, std::numeric_limits<uint64_t>::max());
    flags.checkpoint_every = parse_integer<int64_t>("--checkpoint-every", checkpoint_every, 1, kMaxEpochs);
    if (is_language_model && !given(checkpoint_every_option)) {
      const LanguageModelFlags& lm = *flags.language_model;
      flags.checkpoint_every = lm.eval_every > 0 ? std::min(lm.eval_every, lm.steps) : lm.steps;
    }
    flags.allow_change = parse_allowed_changes(allow_change);
    check(missing == "error" || missing == "drop-row",
          "--missing must be error or drop-row, got \"" + excerpt(missing) + "\"");
    flags.csv.missing = missing == "error" ? trainers::MissingValues::Error : trainers::MissingValues::DropRow;
    check(
        delimiter == "tab" ||
            (delimiter.size() == 1 && std::string_view("\" \r\n").find(delimiter[0]) == std::string_view::npos &&
             delimiter[0] != '\0'),
        "--delimiter must be one character other than a quote or a space, or tab; got \"" + excerpt(delimiter) + "\"");
    flags.csv.delimiter = delimiter == "tab" ? '\t' : delimiter[0];
    check(standardize == "on" || standardize == "off",
          "--standardize must be on or off, got \"" + excerpt(standardize) + "\"");
    flags.standardize = standardize == "on";
    validate(flags);
    if (!is_language_model) {
      flags.activation = parse_value("--activation", [&] { return trainers::parse_activation(activation); });
      parse_value("--lr-schedule", [&] { return trainers::parse_lr_schedule(flags.lr_schedule, flags.epochs); });
    }
    flags.precision = parse_value("--precision", [&] { return parse_precision(precision); });
    flags.timeout_seconds = parse_integer<int64_t>("--timeout", timeout, 1, kMaxTimeoutSeconds);
    flags.launch = comm::LaunchInfo::from_environment();
    flags.devices = parse_value("--devices", [&] { return trainers::process_devices(devices, flags.launch); });
    // A language model multiplies in bf16 on GPUs unless --precision says otherwise (nanoGPT's autocast).
    const bool on_gpus = std::all_of(flags.devices.begin(), flags.devices.end(), [](Device d) { return d.is_cuda(); });
    if (is_language_model && app.get_option("--precision")->count() == 0 && on_gpus) {
      flags.precision = Precision::BFloat16;
    }
    check_distinct_files(flags);
    check_output("--checkpoint", flags.checkpoint);
    check_output("--metrics", flags.metrics);
    check_output("--summary-json", flags.summary_json);
    check_output("--plot", flags.plot);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
    parsed.exit_status = 0;
  } catch (const CLI::CallForVersion& version) {
    std::cout << version.what();
    parsed.exit_status = 0;
  } catch (const CLI::ParseError& e) {
    std::cerr << "tandem-train: " << e.what() << " (see --help)\n";
    parsed.exit_status = 2;
  } catch (const UsageError& e) {
    std::cerr << "tandem-train: " << e.what() << '\n';
    parsed.exit_status = 2;
  }
  return parsed;
}

}  // namespace tandem::train_tool
