#include "flags.h"

#include <CLI/CLI.hpp>
#include <charconv>
#include <chrono>
#include <cmath>
#include <iostream>
#include <limits>
#include <set>
#include <sstream>

#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"
#include "tandem/trainers/process_devices.h"
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

void validate(const Flags& flags) {
  check(flags.lr > 0.0 && std::isfinite(flags.lr), "--lr must be a positive number, got " + text(flags.lr));
  check(flags.momentum >= 0.0 && flags.momentum < 1.0, "--momentum must lie in [0, 1), got " + text(flags.momentum));
  check(flags.test_fraction >= 0.0 && flags.test_fraction < 1.0,
        "--test-fraction must lie in [0, 1), got " + text(flags.test_fraction));
  check(flags.checkpoint_every <= flags.epochs, "--checkpoint-every must be at most --epochs (" +
                                                    std::to_string(flags.epochs) + "), got " +
                                                    std::to_string(flags.checkpoint_every));
  check(flags.allow_change.empty() || flags.resume.has_value(), "--allow-change needs --resume");
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
  // Integers are read as text and parsed here: CLI11 would clamp out-of-range values and accept hex.
  std::string epochs = std::to_string(flags.epochs);
  std::string batch_size = std::to_string(flags.batch_size);
  std::string hidden = std::to_string(flags.hidden);
  std::string seed = "0";
  std::string checkpoint_every = "1";
  std::string allow_change;
  std::string devices = "all";
  std::string timeout = std::to_string(
      std::chrono::duration_cast<std::chrono::seconds>(comm::ProcessGroupOptions{}.timeout).count());
  std::string missing = "error";
  std::string activation = "none";

  CLI::App app(
      "Trains a small regression net with data-parallel SGD. With no flags: Linear(10,20) -> Linear(20,1) "
      "on the built-in diabetes data, on every GPU (else on virtual CPU devices cpu:0 and cpu:1).",
      "tandem-train");
  app.add_option("--data", flags.data, "CSV file: a header line, then numeric rows (default: built-in diabetes)")
      ->check(CLI::ExistingFile);
  app.add_option("--missing", missing,
                 "Cells that are empty or NA, N/A, NaN, nan, null, NULL, None, ?: error (name the cell) or drop-row")
      ->capture_default_str();
  app.add_option("--target", flags.target, "Target column name (default: the last column)");
  app.add_option("--devices", devices,
                 "This process's devices: cuda:0,cuda:1 or cpu:0,cpu:1,cpu:2 or all (under a launcher: this "
                 "process's share of the machine's GPUs)")
      ->capture_default_str();
  app.add_option("--timeout", timeout,
                 "Under a launcher: seconds a collective may take before the whole job ends with an error")
      ->capture_default_str();
  app.add_option("--epochs", epochs, "Epochs in all (a resumed run continues up to this)")->capture_default_str();
  app.add_option("--batch-size", batch_size, "Global batch size (split over the devices)")->capture_default_str();
  app.add_option("--lr", flags.lr, "Learning rate")->capture_default_str();
  app.add_option("--momentum", flags.momentum, "SGD momentum")->capture_default_str();
  app.add_option("--hidden", hidden, "Width of the hidden layer")->capture_default_str();
  app.add_option("--activation", activation, "none|relu|tanh (none: a linear net)")->capture_default_str();
  app.add_option("--seed", seed, "Seed of the initialization and of the shuffling")->capture_default_str();
  app.add_option("--test-fraction", flags.test_fraction, "The last fraction of the rows is the test set")
      ->capture_default_str();
  CLI::Option* checkpoint = app.add_option("--checkpoint", flags.checkpoint, "Write checkpoints to this path");
  app.add_option("--checkpoint-every", checkpoint_every, "Checkpoint every N epochs (and after the last)")
      ->capture_default_str()
      ->needs(checkpoint);
  CLI::Option* resume = app.add_option("--resume", flags.resume, "Continue from this checkpoint (of the same setup)")
                            ->check(CLI::ExistingFile);
  app.add_option("--allow-change", allow_change, "Let the resumed run change these (comma-separated): lr, epochs")
      ->needs(resume);
  app.add_option("--metrics", flags.metrics,
                 "One JSON line per epoch (a resumed run keeps the lines up to its checkpoint)");
  app.add_option("--summary-json", flags.summary_json, "Write the final metrics as JSON to this file");
  app.add_flag("--quiet", flags.quiet, "No per-epoch progress (the final summary is still printed)");

  try {
    app.parse(argc, argv);
    flags.epochs = parse_integer<int64_t>("--epochs", epochs, 1, kMaxEpochs);
    flags.batch_size = parse_integer<int64_t>("--batch-size", batch_size, 1, kMaxBatchSize);
    flags.hidden = parse_integer<int64_t>("--hidden", hidden, 1, kMaxHidden);
    flags.seed = parse_integer<uint64_t>("--seed", seed, 0, std::numeric_limits<uint64_t>::max());
    flags.checkpoint_every = parse_integer<int64_t>("--checkpoint-every", checkpoint_every, 1, kMaxEpochs);
    flags.allow_change = parse_allowed_changes(allow_change);
    check(missing == "error" || missing == "drop-row",
          "--missing must be error or drop-row, got \"" + excerpt(missing) + "\"");
    flags.csv.missing = missing == "error" ? trainers::MissingValues::Error : trainers::MissingValues::DropRow;
    validate(flags);
    flags.activation = parse_value("--activation", [&] { return trainers::parse_activation(activation); });
    flags.timeout_seconds = parse_integer<int64_t>("--timeout", timeout, 1, kMaxTimeoutSeconds);
    flags.launch = comm::LaunchInfo::from_environment();
    flags.devices = parse_value("--devices", [&] { return trainers::process_devices(devices, flags.launch); });
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
