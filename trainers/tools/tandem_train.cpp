// tandem-train: trains a small regression net with data-parallel SGD and reports train/test MSE and R^2.
// Exit status: 0 on success, 2 for a bad flag or value, 1 for any other error (with its message).
// Under a launcher (mpirun, srun, torchrun-style variables; docs/distributed.md) every process runs this program on
// its own devices as one comm::ProcessGroup; rank 0 alone prints and writes files, and an error on any process ends
// every process of the job with status 1 (ProcessGroup::abort) and the message.

#include <chrono>
#include <cstdio>
#include <iostream>
#include <nlohmann/json.hpp>
#include <string>

#include "flags.h"
#include "tandem/tandem.h"

namespace tandem::train_tool {
namespace {

using namespace trainers;

CsvTable load_table(const Flags& flags) {
  CsvTable table = flags.data ? read_csv(*flags.data, flags.csv)
                              : parse_csv(datasets::diabetes_csv(), "diabetes.csv (built in)", flags.csv);
  if (flags.target) {
    std::string names;
    bool found = false;
    for (const std::string& name : table.columns) {
      names += (names.empty() ? "" : ", ") + name;
      found = found || name == *flags.target;
    }
    if (!found) throw UsageError("--target: no column \"" + *flags.target + "\" (columns: " + names + ")");
  }
  return table;
}

std::string describe_model(int64_t inputs, const Flags& flags) {
  std::string activation = flags.activation == Activation::None ? "" : " -> " + to_string(flags.activation);
  return "Linear(" + std::to_string(inputs) + ", " + std::to_string(flags.hidden) + ")" + activation + " -> Linear(" +
         std::to_string(flags.hidden) + ", 1)";
}

// "[cuda:0, cuda:1]" for one process; "2 processes x [cpu:0]" (this process's devices) for a group.
std::string describe_devices(const comm::ProcessGroup& group) {
  if (group.size() == 1) return to_string(group.devices());
  return std::to_string(group.size()) + " processes x " + to_string(group.devices());
}

// Every process's device list, by rank, gathered through the group (collective: every process calls it).
std::vector<std::vector<std::string>> rank_devices(comm::ProcessGroup& group) {
  std::vector<Tensor> mine;  // one row (type, index) per local device, on that device
  for (const Device& device : group.devices()) {
    const std::vector<float> row = {static_cast<float>(device.type()), static_cast<float>(device.index())};
    mine.push_back(Tensor::from_vector(row, {1, 2}, device));
  }
  const std::vector<float> rows = group.all_gather(mine).front().to_vector();  // in global device order
  const size_t per_rank = group.devices().size();
  std::vector<std::vector<std::string>> lists(static_cast<size_t>(group.size()));
  for (size_t g = 0; g < rows.size() / 2; ++g) {
    const Device device(static_cast<DeviceType>(rows[2 * g]), static_cast<int>(rows[2 * g + 1]));
    lists[g / per_rank].push_back(device.str());
  }
  return lists;
}

void print_banner(const Flags& flags, const CsvTable& table, const Dataset& data, const Split& split,
                  const Trainer& trainer) {
  const std::string dropped =
      table.dropped_rows > 0 ? " (" + std::to_string(table.dropped_rows) + " rows with missing values dropped)" : "";
  std::cout << "data: " << (flags.data ? *flags.data : "diabetes (built in)") << ", " << data.rows() << " rows"
            << dropped << ", " << data.num_features() << " features, target \"" << data.target_name << "\"; train "
            << split.train.rows() << " rows, test " << split.test.rows() << " rows\n"
            << "model: " << describe_model(data.num_features(), flags) << " (" << trainer.model()->num_parameters()
            << " parameters) on " << describe_devices(*trainer.group()) << "\n"
            << "sgd: epochs " << flags.epochs << ", global batch " << flags.batch_size << ", lr " << flags.lr
            << ", momentum " << flags.momentum << ", seed " << flags.seed << "\n";
  if (flags.resume) std::cout << "resuming from \"" << *flags.resume << "\" at epoch " << trainer.epoch() << "\n";
}

void print_summary(const FitResult& result, const Trainer& trainer) {
  std::printf("done: %lld epochs, %lld steps in %.3f s on %s\n", static_cast<long long>(result.epochs),
              static_cast<long long>(result.steps), result.seconds, describe_devices(*trainer.group()).c_str());
  std::printf("train: mse %.4f  r2 %.4f  (%lld rows)\n", result.train.mse, result.train.r2,
              static_cast<long long>(result.train.rows));
  if (result.test) {
    std::printf("test:  mse %.4f  r2 %.4f  (%lld rows)\n", result.test->mse, result.test->r2,
                static_cast<long long>(result.test->rows));
  }
  std::fflush(stdout);
}

void write_summary(const std::string& path, const FitResult& result, const Trainer& trainer,
                   const std::vector<std::vector<std::string>>& devices_by_rank) {
  nlohmann::ordered_json summary;
  summary["train_mse"] = result.train.mse;
  summary["train_r2"] = result.train.r2;
  summary["test_mse"] = result.test ? nlohmann::ordered_json(result.test->mse) : nullptr;
  summary["test_r2"] = result.test ? nlohmann::ordered_json(result.test->r2) : nullptr;
  summary["train_rows"] = result.train.rows;
  summary["test_rows"] = result.test ? result.test->rows : 0;
  summary["epochs"] = result.epochs;
  summary["steps"] = result.steps;
  summary["devices"] = nlohmann::ordered_json::array();
  for (const Device& device : trainer.options().devices) summary["devices"].push_back(device.str());
  summary["world_size"] = trainer.group()->size();
  summary["rank_devices"] = devices_by_rank;
  summary["seconds"] = result.seconds;
  write_file_atomically(path, summary.dump(2) + "\n", "--summary-json");
}

// What a checkpoint of this tool records beyond the Trainer's own facts (model, optimizer, batch size, epochs and a
// fingerprint of the training rows): the data's provenance and column choices, which a resume must keep.
SetupFacts setup_facts(const Flags& flags, const Dataset& data) {
  std::string features;
  for (const std::string& name : data.feature_names) features += (features.empty() ? "" : ",") + name;
  return {{"features", features},
          {"target", data.target_name},
          {"missing", flags.csv.missing == MissingValues::Error ? "error" : "drop-row"},
          {"test_fraction", exact_text(flags.test_fraction)}};
}

void resume(Trainer& trainer, const std::string& path) {
  try {
    trainer.load_checkpoint(path);
  } catch (const SetupMismatch& e) {
    throw SetupMismatch(std::string(e.what()) + "; --allow-change lr,epochs allows changing those two");
  }
}

int train(const Flags& flags, const std::shared_ptr<comm::ProcessGroup>& group) {
  const bool primary = group->rank() == 0;  // prints and writes the files
  const CsvTable table = load_table(flags);
  const Dataset data = make_dataset(table, flags.target);
  const Split split = train_test_split(data, flags.test_fraction);

  manual_seed(flags.seed);
  TrainerOptions options;
  options.group = group;
  options.epochs = flags.epochs;
  options.batch_size = flags.batch_size;
  options.sgd = optim::SGDOptions{.lr = flags.lr, .momentum = flags.momentum};
  options.shuffle_seed = flags.seed;
  options.setup = setup_facts(flags, data);
  options.resume_may_change = flags.allow_change;
  Trainer trainer(make_mlp(data.num_features(), flags.hidden, flags.activation), options);
  if (flags.resume) resume(trainer, *flags.resume);

  if (primary && !flags.quiet) {
    print_banner(flags, table, data, split, trainer);
    trainer.add_callback(ProgressPrinter::to_stdout());
  }
  if (primary && flags.metrics) {
    trainer.add_callback(std::make_shared<MetricsLogger>(*flags.metrics, flags.resume.has_value()));
  }
  if (primary && flags.checkpoint) {
    trainer.add_callback(std::make_shared<CheckpointSaver>(*flags.checkpoint, flags.checkpoint_every));
  }

  const FitResult result = trainer.fit(split.train, split.test);
  const auto devices_by_rank = flags.summary_json ? rank_devices(*group) : std::vector<std::vector<std::string>>{};
  if (!primary) return 0;
  print_summary(result, trainer);
  if (flags.summary_json) write_summary(*flags.summary_json, result, trainer, devices_by_rank);
  return 0;
}

// Trains as one process of the launcher's group (alone without a launcher). Note [One error ends the job]: the
// other processes may be waiting in a collective for this one, so an error here, after the group exists, ends every
// process of the job (status 1, the message on stderr naming this rank) instead of leaving them to the timeout.
int run(const Flags& flags) {
  const std::shared_ptr<comm::ProcessGroup> group = comm::ProcessGroup::from_environment(
      flags.devices, {.timeout = std::chrono::seconds(flags.timeout_seconds)});
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
