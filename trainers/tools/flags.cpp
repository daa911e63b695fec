#include "flags.h"

#include <CLI/CLI.hpp>
#include <cmath>
#include <iostream>
#include <sstream>

#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"
#include "tandem/trainers/trainer.h"

namespace tandem::train_tool {
namespace {

// The seed net is Linear(10, 20) -> Linear(20, 1); the last 20% of the rows are the test set.
constexpr int64_t kHidden = 20;
constexpr double kTestFraction = 0.2;

void check(bool ok, const std::string& message) {
  if (!ok) throw UsageError(message);
}

std::string text(double value) {
  std::ostringstream out;
  out << value;
  return out.str();
}

void validate(const Flags& flags) {
  check(flags.epochs >= 1, "--epochs must be at least 1, got " + std::to_string(flags.epochs));
  check(flags.batch_size >= 1, "--batch-size must be at least 1, got " + std::to_string(flags.batch_size));
  check(flags.lr > 0.0 && std::isfinite(flags.lr), "--lr must be a positive number, got " + text(flags.lr));
  check(flags.momentum >= 0.0 && flags.momentum < 1.0,
        "--momentum must lie in [0, 1), got " + text(flags.momentum));
  check(flags.hidden >= 1, "--hidden must be at least 1, got " + std::to_string(flags.hidden));
  check(flags.test_fraction >= 0.0 && flags.test_fraction < 1.0,
        "--test-fraction must lie in [0, 1), got " + text(flags.test_fraction));
  check(flags.checkpoint_every >= 1,
        "--checkpoint-every must be at least 1, got " + std::to_string(flags.checkpoint_every));
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

ParsedFlags parse_flags(int argc, char** argv) {
  ParsedFlags parsed;
  Flags& flags = parsed.flags;
  const trainers::TrainerOptions defaults;
  flags.epochs = defaults.epochs;
  flags.batch_size = defaults.batch_size;
  flags.lr = defaults.sgd.lr;
  flags.momentum = defaults.sgd.momentum;
  flags.hidden = kHidden;
  flags.test_fraction = kTestFraction;
  int64_t seed = 0;  // read as a signed number so that a negative one is refused, not wrapped
  std::string devices = "all";
  std::string activation = "none";

  CLI::App app("Trains a small regression net with data-parallel SGD. With no flags: Linear(10,20) -> Linear(20,1) "
               "on the built-in diabetes data, on every GPU (else on virtual CPU devices cpu:0 and cpu:1).",
               "tandem-train");
  app.add_option("--data", flags.data, "CSV file: a header line, then numeric rows (default: built-in diabetes)")
      ->check(CLI::ExistingFile);
  app.add_option("--target", flags.target, "Target column name (default: the last column)");
  app.add_option("--devices", devices, "cuda:0,cuda:1 or cpu:0,cpu:1,cpu:2 or all")->capture_default_str();
  app.add_option("--epochs", flags.epochs, "Epochs in all (a resumed run continues up to this)")
      ->capture_default_str();
  app.add_option("--batch-size", flags.batch_size, "Global batch size (split over the devices)")
      ->capture_default_str();
  app.add_option("--lr", flags.lr, "Learning rate")->capture_default_str();
  app.add_option("--momentum", flags.momentum, "SGD momentum")->capture_default_str();
  app.add_option("--hidden", flags.hidden, "Width of the hidden layer")->capture_default_str();
  app.add_option("--activation", activation, "none|relu|tanh (none: a linear net)")->capture_default_str();
  app.add_option("--seed", seed, "Seed of the initialization and of the shuffling")->capture_default_str();
  app.add_option("--test-fraction", flags.test_fraction, "The last fraction of the rows is the test set")
      ->capture_default_str();
  CLI::Option* checkpoint = app.add_option("--checkpoint", flags.checkpoint, "Write checkpoints to this path");
  app.add_option("--checkpoint-every", flags.checkpoint_every, "Checkpoint every N epochs (and after the last)")
      ->capture_default_str()
      ->needs(checkpoint);
  app.add_option("--resume", flags.resume, "Continue from this checkpoint")->check(CLI::ExistingFile);
  app.add_option("--metrics", flags.metrics,
                 "One JSON line per epoch (a resumed run keeps the lines up to its checkpoint)");
  app.add_option("--summary-json", flags.summary_json, "Write the final metrics as JSON to this file");
  app.add_flag("--quiet", flags.quiet, "No per-epoch progress (the final summary is still printed)");

  try {
    app.parse(argc, argv);
    check(seed >= 0, "--seed must not be negative, got " + std::to_string(seed));
    flags.seed = static_cast<uint64_t>(seed);
    validate(flags);
    flags.activation = parse_value("--activation", [&] { return trainers::parse_activation(activation); });
    flags.devices = parse_value("--devices", [&] { return parse_devices(devices); });
    check_output("--checkpoint", flags.checkpoint);
    check_output("--metrics", flags.metrics);
    check_output("--summary-json", flags.summary_json);
  } catch (const CLI::CallForHelp&) {
    std::cout << app.help();
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
