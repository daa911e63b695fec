// tandem-train: trains a small regression net (train/test MSE and R^2) or classifier (accuracy, confusion matrix),
// data parallel, with SGD, Adam or AdamW; or, with --task language-model, a GPT on a text file
// (language_model_tool.cpp).
// Exit status: 0 on success, 2 for a bad flag or value, 1 for any other error (with its message).
// Under a launcher (mpirun, srun, torchrun-style variables; docs/distributed.md) every process runs this program on
// its own devices as one comm::ProcessGroup; rank 0 alone prints and writes files, and an error on any process ends
// every process of the job with status 1 (ProcessGroup::abort) and the message.

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "flags.h"
#include "language_model_tool.h"
#include "run_devices.h"
#include "tandem/tandem.h"

namespace tandem::train_tool {
namespace {

using namespace trainers;

CsvTable load_table(const Flags& flags) {
  CsvOptions options = flags.csv;
  // With --features, the columns neither named there nor the target are skipped unread: text or gaps in them are
  // no error (the target is --target's column, else the header's last).
  if (!flags.features.empty()) {
    options.keep_column = [&](const std::string& name, size_t index, size_t count) {
      const bool target = flags.target ? name == *flags.target : index + 1 == count;
      return target || std::find(flags.features.begin(), flags.features.end(), name) != flags.features.end();
    };
  }
  CsvTable table = flags.data ? read_csv(*flags.data, options)
                              : parse_csv(datasets::diabetes_csv(), "diabetes.csv (built in)", options);
  std::string names;
  for (const std::string& name : table.header) names += (names.empty() ? "" : ", ") + name;
  const auto check_column = [&](const char* flag, const std::string& wanted) {
    if (std::find(table.columns.begin(), table.columns.end(), wanted) == table.columns.end()) {
      throw UsageError(std::string(flag) + ": no column \"" + excerpt(wanted) + "\" (columns: " + excerpt(names, 400) +
                       ")");
    }
  };
  if (flags.target) check_column("--target", *flags.target);
  const std::string target = flags.target ? *flags.target : table.header.back();
  for (const std::string& feature : flags.features) {
    check_column("--features", feature);
    if (feature == target) throw UsageError("--features: \"" + excerpt(feature) + "\" is the target column");
  }
  return table;
}

// "0.5,0.25": each value exact (exact_text), comma-separated, as --normalize-mean takes them.
std::string value_list(const std::vector<double>& values) {
  std::string text;
  for (const double value : values) text += (text.empty() ? "" : ",") + exact_text(value);
  return text;
}

// "Linear(10, 20) -> relu -> Linear(20, 1)" or "Linear(64, 128) -> relu -> dropout 0.2 -> Linear(128, 10)", as
// make_mlp builds it.
std::string describe_model(int64_t inputs, int64_t outputs, const Flags& flags) {
  std::string after_hidden = flags.activation == Activation::None ? "" : " -> " + to_string(flags.activation);
  if (flags.dropout != 0.0) after_hidden += " -> dropout " + exact_text(flags.dropout);
  std::string text;
  int64_t width = inputs;
  for (int64_t hidden : flags.layers) {
    text += "Linear(" + std::to_string(width) + ", " + std::to_string(hidden) + ")" + after_hidden + " -> ";
    width = hidden;
  }
  return text + "Linear(" + std::to_string(width) + ", " + std::to_string(outputs) + ")";
}

// "Unflatten(1, [1, 8, 8]) -> Conv2d(1, 32, 3, padding 1) -> relu -> ... -> Linear(128, 10)", as make_cnn builds it.
std::string describe_cnn(const CnnOptions& cnn) {
  const std::string dropout = cnn.dropout != 0.0 ? "dropout " + exact_text(cnn.dropout) + " -> " : "";
  const Shape& image = cnn.image_shape;
  return "Unflatten(1, " + tandem::to_string(image) + ") -> Conv2d(" + std::to_string(image[0]) + ", " +
         std::to_string(cnn.channels1) + ", 3, padding 1) -> relu -> Conv2d(" + std::to_string(cnn.channels1) + ", " +
         std::to_string(cnn.channels2) + ", 3, padding 1) -> relu -> MaxPool2d(2) -> Flatten -> " + dropout +
         "Linear(" + std::to_string(cnn.channels2 * (image[1] / 2) * (image[2] / 2)) + ", " +
         std::to_string(cnn.hidden) + ") -> relu -> " + dropout + "Linear(" + std::to_string(cnn.hidden) + ", " +
         std::to_string(cnn.classes) + ")";
}

// make_cnn's options for --model cnn. Errors (UsageError): an --image-shape whose pixels are not the data's features.
CnnOptions cnn_options(const Flags& flags, int64_t features, int64_t classes) {
  const Shape& image = flags.image_shape;
  if (image[0] * image[1] * image[2] != features) {
    throw UsageError("--image-shape " + std::to_string(image[0]) + "," + std::to_string(image[1]) + "," +
                     std::to_string(image[2]) + " holds " + std::to_string(image[0] * image[1] * image[2]) +
                     " pixels but the data has " + std::to_string(features) +
                     " feature columns; expected C*H*W to equal them");
  }
  return {.image_shape = image, .classes = classes, .dropout = flags.dropout};
}

// "adamw: lr 0.001, weight decay 0.01, lr schedule cosine (t_max 100)" and the like.
std::string describe_optimizer(const Flags& flags, const TrainerOptions& options) {
  std::ostringstream text;
  text << to_string(flags.optimizer) << ": epochs " << flags.epochs << ", global batch " << flags.batch_size;
  if (flags.accumulate_steps != 1) text << " (" << flags.accumulate_steps << " per step)";
  if (flags.zero_stage != 0) text << ", zero stage " << flags.zero_stage;
  text << ", lr " << flags.lr;
  if (flags.optimizer == Optimizer::SGD) text << ", momentum " << flags.momentum;
  if (flags.weight_decay != 0.0 || flags.optimizer != Optimizer::SGD) text << ", weight decay " << flags.weight_decay;
  if (options.lr_schedule) text << ", lr schedule " << options.lr_schedule->name;
  if (flags.precision != Precision::Float32) text << ", precision " << precision_name(flags.precision);
  text << ", seed " << flags.seed;
  return text.str();
}

// The optimizer the flags name: the Trainer's SGD, or Adam / AdamW built per replica.
void set_optimizer(const Flags& flags, TrainerOptions& options) {
  options.sgd = optim::SGDOptions{.lr = flags.lr, .momentum = flags.momentum, .weight_decay = flags.weight_decay};
  if (flags.optimizer == Optimizer::Adam) {
    const optim::AdamOptions adam{.lr = flags.lr, .weight_decay = flags.weight_decay};
    options.optimizer = CustomOptimizer{"adam", [adam](std::vector<Tensor> parameters) {
                                          return std::make_unique<optim::Adam>(std::move(parameters), adam);
                                        }};
  }
  if (flags.optimizer == Optimizer::AdamW) {
    const optim::AdamWOptions adamw{.lr = flags.lr, .weight_decay = flags.weight_decay};
    options.optimizer = CustomOptimizer{"adamw", [adamw](std::vector<Tensor> parameters) {
                                          return std::make_unique<optim::AdamW>(std::move(parameters), adamw);
                                        }};
  }
}

void print_banner(const Flags& flags, const CsvTable& table, const TableDataset& data, const Split& split,
                  const Trainer& trainer, const std::string& model) {
  const std::string dropped =
      table.dropped_rows > 0 ? " (" + std::to_string(table.dropped_rows) + " rows with missing values dropped)" : "";
  std::cout << "data: " << (flags.data ? *flags.data : "diabetes (built in)") << ", " << data.rows() << " rows"
            << dropped << ", " << data.num_features() << " features, target \"" << data.target_name << "\"; train "
            << split.train.rows() << " rows, test " << split.test.rows() << " rows\n"
            << "model: " << model << " (" << trainer.model()->num_parameters() << " parameters) on "
            << describe_devices(*trainer.group()) << "\n"
            << describe_optimizer(flags, trainer.options()) << "\n";
  if (flags.crop_padding > 0) {
    std::cout << "training on random crops of the images padded by " << flags.crop_padding << "\n";
  }
  if (flags.horizontal_flip) std::cout << "training on images flipped left to right with probability 1/2\n";
  if (!flags.normalize_mean.empty()) {
    std::cout << "normalizing every image per channel: mean " << value_list(flags.normalize_mean) << ", std "
              << value_list(flags.normalize_std) << "\n";
  }
  if (!trainer.options().classes.empty()) {
    std::cout << "classes: " << trainer.options().classes.size() << " (labels "
              << excerpt(trainer.options().classes.str()) << ")\n";
  }
  if (flags.resume) std::cout << "resuming from \"" << *flags.resume << "\" at epoch " << trainer.epoch() << "\n";
}

// "steps: captured as a CUDA graph (598 steps replayed)" or "steps: eager (<why>)".
std::string describe_steps(const FitResult& result) {
  if (!result.steps_captured()) return "steps: eager (" + result.eager_reason + ")";
  return "steps: captured as a CUDA graph (" + std::to_string(result.captured_steps) + " steps replayed)";
}

void print_summary(const FitResult& result, const Trainer& trainer) {
  std::printf("done: %lld epochs, %lld steps in %.3f s on %s\n", static_cast<long long>(result.epochs),
              static_cast<long long>(result.steps), result.seconds, describe_devices(*trainer.group()).c_str());
  std::printf("%s\n", describe_steps(result).c_str());
  if (result.train_classes) {
    std::printf("train: accuracy %.4f  loss %.4f  (%lld rows)\n", result.train_classes->accuracy,
                result.train_classes->cross_entropy, static_cast<long long>(result.train_classes->rows));
  } else {
    std::printf("train: mse %.4f  r2 %.4f  (%lld rows)\n", result.train.mse, result.train.r2,
                static_cast<long long>(result.train.rows));
  }
  if (result.test_classes) {
    std::printf("test:  accuracy %.4f  loss %.4f  (%lld rows)\n", result.test_classes->accuracy,
                result.test_classes->cross_entropy, static_cast<long long>(result.test_classes->rows));
  }
  if (result.test) {
    std::printf("test:  mse %.4f  r2 %.4f  (%lld rows)\n", result.test->mse, result.test->r2,
                static_cast<long long>(result.test->rows));
  }
  std::fflush(stdout);
}

void write_summary(const std::string& path, const FitResult& result, const Trainer& trainer,
                   const std::vector<std::vector<std::string>>& devices_by_rank) {
  nlohmann::ordered_json summary;
  if (result.train_classes) {
    const ClassificationMetrics& train = *result.train_classes;
    const std::optional<ClassificationMetrics>& test = result.test_classes;
    summary["train_accuracy"] = train.accuracy;
    summary["test_accuracy"] = test ? nlohmann::ordered_json(test->accuracy) : nullptr;
    summary["train_loss"] = train.cross_entropy;
    summary["test_loss"] = test ? nlohmann::ordered_json(test->cross_entropy) : nullptr;
    summary["classes"] = trainer.options().classes.labels();
    // [actual][predicted]; null above kMaxConfusionClasses classes, which bounds what the summary holds.
    const bool matrices = !train.confusion.empty();
    summary["confusion_matrix"] = test && matrices ? nlohmann::ordered_json(test->confusion) : nullptr;
    summary["train_confusion_matrix"] = matrices ? nlohmann::ordered_json(train.confusion) : nullptr;
    summary["train_rows"] = train.rows;
    summary["test_rows"] = test ? test->rows : 0;
  } else {
    summary["train_mse"] = result.train.mse;
    summary["train_r2"] = result.train.r2;
    summary["test_mse"] = result.test ? nlohmann::ordered_json(result.test->mse) : nullptr;
    summary["test_r2"] = result.test ? nlohmann::ordered_json(result.test->r2) : nullptr;
    summary["train_rows"] = result.train.rows;
    summary["test_rows"] = result.test ? result.test->rows : 0;
  }
  summary["epochs"] = result.epochs;
  summary["steps"] = result.steps;
  summary["devices"] = nlohmann::ordered_json::array();
  for (const Device& device : trainer.options().devices) summary["devices"].push_back(device.str());
  summary["world_size"] = trainer.group()->size();
  summary["rank_devices"] = devices_by_rank;
  summary["seconds"] = result.seconds;
  summary["setup_seconds"] = result.setup_seconds;
  summary["step_mode"] = result.steps_captured() ? "captured" : "eager";
  if (!result.steps_captured()) summary["eager_reason"] = result.eager_reason;
  summary["captured_steps"] = result.captured_steps;
  summary["zero_stage"] = trainer.options().zero_stage;
  summary["optimizer_state_bytes_per_device"] = trainer.optimizer_state_bytes_per_device();
  summary["gradient_bytes_per_device"] = trainer.gradient_bytes_per_device();
  summary["setup"] = trainer.setup();  // the run's hyperparameters and data, as its checkpoints record them
  write_file_atomically(path, summary.dump(2) + "\n", "--summary-json");
}

// What a checkpoint of this tool records beyond the Trainer's own facts (model, optimizer, batch size, epochs and a
// fingerprint of the training rows): the data's provenance and column choices, which a resume must keep, and for
// Adam and AdamW (custom optimizers to the Trainer, which records SGD's options only) the lr and the weight decay.
SetupFacts setup_facts(const Flags& flags, const TableDataset& data) {
  std::string features;
  for (const std::string& name : data.feature_names) features += (features.empty() ? "" : ",") + name;
  SetupFacts facts = {{"features", features},
                      {"target", data.target_name},
                      {"missing", flags.csv.missing == MissingValues::Error ? "error" : "drop-row"},
                      {"test_fraction", exact_text(flags.test_fraction)}};
  if (flags.optimizer != Optimizer::SGD) {
    facts["lr"] = exact_text(flags.lr);
    facts["weight_decay"] = exact_text(flags.weight_decay);
  }
  // Only a run with Dropout layers records its rate, so that checkpoints of runs without them keep their facts.
  if (flags.dropout != 0.0) facts.emplace("dropout", exact_text(flags.dropout));
  // Likewise only a CNN records its image shape and crops (the Trainer records the model itself).
  if (flags.model == Flags::Model::CNN) {
    facts.emplace("image_shape", tandem::to_string(flags.image_shape));
    facts.emplace("crop_padding", std::to_string(flags.crop_padding));
    if (flags.horizontal_flip) facts.emplace("horizontal_flip", "true");
    if (!flags.normalize_mean.empty()) {
      facts.emplace("normalize_mean", value_list(flags.normalize_mean));
      facts.emplace("normalize_std", value_list(flags.normalize_std));
    }
  }
  return facts;
}

void resume(Trainer& trainer, const std::string& path) {
  try {
    trainer.load_checkpoint(path);
  } catch (const SetupMismatch& e) {
    throw SetupMismatch(std::string(e.what()) + "; --allow-change lr allows changing the learning rate");
  }
}

int train(const Flags& flags, const std::shared_ptr<comm::ProcessGroup>& group) {
  if (flags.language_model) return train_language_model(flags, group);
  const bool primary = group->rank() == 0;  // prints and writes the files
  const CsvTable table = load_table(flags);
  const TableDataset data = make_dataset(table, flags.target, flags.features);
  const Split split = train_test_split(data, flags.test_fraction);

  manual_seed(flags.seed);
  TrainerOptions options;
  options.group = group;
  options.epochs = flags.epochs;
  options.batch_size = flags.batch_size;
  options.accumulate_steps = flags.accumulate_steps;
  options.zero_stage = flags.zero_stage;
  set_optimizer(flags, options);
  options.lr_schedule = parse_lr_schedule(flags.lr_schedule, flags.epochs);
  options.task = flags.task;
  if (flags.task == Task::Classification) options.classes = ClassLabels::of(data);
  options.shuffle_seed = flags.seed;
  options.standardize_features = flags.standardize;
  if (!flags.standardize) options.standardize_target = false;
  options.precision = flags.precision;
  options.capture = flags.capture;
  options.setup = setup_facts(flags, data);
  // Resuming to more epochs is the everyday case: allowed always. A change it brings along (a cosine schedule's
  // t_max) is still a difference of another fact, and refused.
  options.resume_may_change = flags.allow_change;
  options.resume_may_change.insert("epochs");
  const int64_t outputs = options.classes.empty() ? 1 : options.classes.size();
  std::shared_ptr<nn::Sequential> model;
  std::string model_text;
  if (flags.model == Flags::Model::CNN) {
    const CnnOptions cnn = cnn_options(flags, data.num_features(), outputs);
    model = make_cnn(cnn);
    model_text = describe_cnn(cnn);
    const bool normalize = !flags.normalize_mean.empty();
    if (flags.crop_padding > 0 || flags.horizontal_flip || normalize) {
      options.transform =
          std::make_shared<ImageTransforms>(ImageTransformOptions{.image_shape = flags.image_shape,
                                                                  .crop_padding = flags.crop_padding,
                                                                  .horizontal_flip = flags.horizontal_flip,
                                                                  .mean = flags.normalize_mean,
                                                                  .std = flags.normalize_std,
                                                                  .seed = flags.seed});
    }
    if (normalize) {  // the evaluations see the images normalized alike, uncropped and unflipped
      options.eval_transform = std::make_shared<ImageTransforms>(ImageTransformOptions{
          .image_shape = flags.image_shape, .mean = flags.normalize_mean, .std = flags.normalize_std});
    }
  } else {
    model = make_mlp(data.num_features(), flags.layers, outputs, flags.activation, flags.dropout);
    model_text = describe_model(data.num_features(), outputs, flags);
  }
  Trainer trainer(model, options);
  if (flags.resume) resume(trainer, *flags.resume);

  if (primary && !flags.quiet) {
    print_banner(flags, table, data, split, trainer, model_text);
    trainer.add_callback(ProgressPrinter::to_stdout());
  }
  if (primary && flags.metrics) {
    trainer.add_callback(std::make_shared<MetricsLogger>(*flags.metrics, flags.resume.has_value()));
  }
  if (primary && flags.plot) trainer.add_callback(std::make_shared<PlotWriter>(*flags.plot));
  // On every process: at --zero 1 a save gathers the optimizer's shards, a collective; rank 0 alone writes the file.
  if (flags.checkpoint) {
    trainer.add_callback(std::make_shared<CheckpointSaver>(*flags.checkpoint, flags.checkpoint_every));
  }

  const FitResult result = trainer.fit(split.train, split.test);
  // Every process takes part, whatever its own flags say: an output flag given to rank 0 alone must not leave it
  // waiting in a collective the others never enter.
  const std::vector<std::vector<std::string>> devices_by_rank = rank_devices(*group);
  if (!primary) return 0;
  print_summary(result, trainer);
  if (flags.summary_json) write_summary(*flags.summary_json, result, trainer, devices_by_rank);
  return 0;
}

// Trains as one process of the launcher's group (alone without a launcher). Note [One error ends the job]: the
// other processes may be waiting in a collective for this one, so an error here, after the group exists, ends every
// process of the job (status 1, the message on stderr naming this rank) instead of leaving them to the timeout.
int run(const Flags& flags) {
  const std::shared_ptr<comm::ProcessGroup> group =
      comm::ProcessGroup::from_environment(flags.devices, {.timeout = std::chrono::seconds(flags.timeout_seconds)});
  if (group->size() == 1) return train(flags, group);  // errors are reported by main as without a launcher
  try {
    return train(flags, group);
  } catch (const std::exception& e) {
    std::cout << std::flush;
    group->abort(std::string("tandem-train: ") + e.what());
  }
}

}  // namespace
}  // namespace tandem::train_tool

int main(int argc, char** argv) {
  using namespace tandem::train_tool;
  try {
    ParsedFlags parsed = parse_flags(argc, argv);
    if (parsed.exit_status) return *parsed.exit_status;
    return run(parsed.flags);
  } catch (const UsageError& e) {
    std::cerr << "tandem-train: " << e.what() << '\n';
    return 2;
  } catch (const std::exception& e) {
    std::cout << std::flush;
    std::cerr << "tandem-train: " << e.what() << '\n';
    return 1;
  } catch (...) {
    std::cerr << "tandem-train: unknown error\n";
    return 1;
  }
}
