// The Trainer's setup facts, and its checkpoints: what a run records of itself, written, and read back all or
// nothing on a resume (Note [All-or-nothing resume]).
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "checkpoint_restore.h"
#include "tandem/core/error.h"
#include "tandem/core/grad_mode.h"
#include "tandem/core/random.h"
#include "tandem/parallel/sharded_state.h"
#include "tandem/trainers/checkpoint.h"
#include "tandem/trainers/trainer.h"

namespace tandem::trainers {

void Trainer::check_same_training_data(const std::string& current) {
  if (resumed_ && resumed_->train_data != current) {
    TANDEM_FAIL("Trainer::fit: the training data differs from the data of the checkpoint '", resumed_->path,
                "' being resumed: ", resumed_->train_data, " there, ", current, " now");
  }
  train_data_ = current;
}

// What every process of a group must share for fit to start besides setup() (Note [Setups compared across
// processes]): the test set (setup() has the training set's fingerprint) and the state the training starts from.
SetupFacts Trainer::facts_of_this_fit(const std::string& test_data) const {
  SetupFacts facts;
  facts["test data"] = test_data;
  std::vector<Tensor> state = model_->parameters();
  std::string steps;
  // At zero_stage 1 and 2 each process holds the state of other shards: only the parameters and counters are compared.
  for (const optim::ParameterState& parameter :
       optimizer_ != nullptr ? optimizer_->state_dict().parameters : std::vector<optim::ParameterState>{}) {
    steps += std::to_string(parameter.step) + ",";
    for (const auto& [slot, tensor] : parameter.tensors) state.push_back(tensor);
  }
  facts["state"] = "epoch " + std::to_string(epoch_) + ", step " + std::to_string(step_) + ", shuffle state " +
                   std::to_string(shuffle_state_) + ", optimizer steps [" + steps + "], values " + fingerprint(state);
  return facts;
}

SetupFacts Trainer::setup() const {
  SetupFacts facts = options_.setup;
  const auto add = [&](const std::string& name, std::string value) {
    TANDEM_CHECK(facts.emplace(name, std::move(value)).second, "Trainer: options.setup must not set \"", name,
                 "\", which the Trainer records itself");
  };
  add("model", describe_module(*model_));
  add("loss", options_.loss.name);
  if (options_.precision && *options_.precision != Precision::Float32)
    add("precision", precision_name(*options_.precision));
  if (options_.optimizer) {
    add("optimizer", options_.optimizer->name);
  } else {
    const optim::SGDOptions& sgd = options_.sgd;
    add("optimizer", "sgd");
    add("lr", exact_text(sgd.lr));
    add("momentum", exact_text(sgd.momentum));
    add("weight_decay", exact_text(sgd.weight_decay));
    add("dampening", exact_text(sgd.dampening));
    add("nesterov", sgd.nesterov ? "true" : "false");
  }
  add("batch_size", std::to_string(options_.batch_size));
  if (options_.accumulate_steps != 1) add("accumulate_steps", std::to_string(options_.accumulate_steps));
  add("shuffle_seed", std::to_string(options_.shuffle_seed));
  add("standardize_target", options_.standardize_target ? "true" : "false");
  if (options_.standardize_features == false) add("standardize_features", "false");
  add("epochs", std::to_string(options_.epochs));
  if (options_.lr_schedule) add("lr_schedule", options_.lr_schedule->name);
  if (classifier()) {
    add("task", "classification");
    add("classes", options_.classes.str());
  }
  if (train_data_) add("train_data", *train_data_);
  return facts;
}

// Note [Checkpoints at any world size]: a checkpoint holds the optimizer state in the plain optimizer's form, one
// entry per parameter, whatever the stage and device count that wrote it. At zero_stage 1 and 2 saving gathers it
// from the shards one bucket slot at a time, as rank 0 writes it (a collective: every process saves, and the others
// take part in each gather), so no process ever holds the whole state; resuming gives each device its chunks under
// its own layout, so a run resumes at another world size, sharded or not (tandem/parallel/sharded_state.h).
void Trainer::save_checkpoint(const std::string& path) const {
  TANDEM_CHECK(standardizer_.has_value(), "Trainer::save_checkpoint: nothing to save before fit()");
  const optim::StreamedOptimizerState optimizer =
      sharded_ != nullptr ? parallel::stream_optimizer_state(*sharded_) : optim::StreamedOptimizerState{};
  if (!primary()) {
    optim::drain(optimizer);                             // the gathers rank 0 writes from
    last_checkpoint_ = WrittenCheckpoint{path, epoch_};  // rank 0's file, which holds this process's state too
    return;
  }
  Checkpoint checkpoint;
  checkpoint.model_state = checkpoint_restore::model_state(*model_);
  checkpoint.epoch = epoch_;
  checkpoint.step = step_;
  checkpoint.generator = generator_state();
  checkpoint.shuffle_state = shuffle_state_;
  checkpoint.standardizer = *standardizer_;
  checkpoint.setup = setup();
  if (sharded_ != nullptr) {
    trainers::save_checkpoint(checkpoint, optimizer, path);
  } else {
    checkpoint.optimizer = optimizer_->state_dict();
    trainers::save_checkpoint(checkpoint, path);
  }
  last_checkpoint_ = WrittenCheckpoint{path, epoch_};
}

void Trainer::load_checkpoint(const std::string& path) {
  // Note [All-or-nothing resume]: everything that can be wrong with the file is checked before the first write to
  // the model, the optimizer or the counters, so a refused checkpoint leaves the Trainer exactly as it was. The
  // optimizer's load_state_dict (set_state for version 3) is the last check and the first write: it checks the whole
  // state before it writes anything, and every replica's optimizer takes the same state over parameters of the same
  // shapes, so once the first accepts it, the rest does too.
  constexpr const char* kCaller = "Trainer::load_checkpoint";
  using namespace checkpoint_restore;
  Checkpoint checkpoint = trainers::load_checkpoint(path);
  TANDEM_CHECK(!checkpoint.language_model, kCaller, ": '", path,
               "' is a language model's checkpoint (LanguageModelTrainer::load_checkpoint reads it)");
  refuse_other_setup(
      kCaller, path, checkpoint.setup, setup(),
      [&] {
        std::set<std::string> ignored = options_.resume_may_change;
        ignored.insert("train_data");  // compared when fit() sees the data
        return ignored;
      }(),
      "only lr and epochs may be allowed to change, through resume_may_change");
  TANDEM_CHECK(checkpoint.setup.contains("train_data"), kCaller, ": '", path,
               "' records no train_data fact (every checkpoint of a fit does)");
  TANDEM_CHECK(checkpoint.epoch <= options_.epochs, kCaller, ": '", path, "' is at epoch ", checkpoint.epoch,
               " but epochs is ", options_.epochs, "; epochs counts all epochs (those before a resume too)");

  const auto parameters = model_->named_parameters();
  const auto buffers = model_->named_buffers();
  const bool version3 = checkpoint.version == 3;
  TANDEM_CHECK(!version3 || sharded_ == nullptr, kCaller, ": '", path, "' is a version 3 checkpoint (momentum ",
               "buffers only), which zero_stage ", options_.zero_stage, " cannot shard; resume it at zero_stage 0");
  if (version3 && !buffers.empty()) {
    TANDEM_FAIL(kCaller, ": '", path, "' is a version 3 checkpoint, which keeps no buffers, but the ", "model has ",
                buffers.size(), " (", buffers.front().first, ", ...); its running statistics cannot be ",
                "restored, so the run would not continue exactly");
  }
  const std::vector<Expected> slots = model_tensors(*model_);
  // Note [Checkpoint checksums] in checkpoint.cpp: a checksum, when the file has one, tells damage; older files are
  // checked for the values a run never saves instead.
  const bool with_checksum = !checkpoint.recorded_checksum.empty();
  const std::vector<Tensor> values = matched_all(kCaller, slots, checkpoint.model_state, path, !with_checksum);
  const std::vector<Tensor> momentum_buffers = matched(kCaller, expected(parameters, "momentum buffer"),
                                                       checkpoint.momentum_buffers, "momentum buffer", path, true);
  if (!version3) {
    if (!with_checksum) check_finite(kCaller, checkpoint.optimizer, parameters, path);
    const std::string kind =
        sharded_ != nullptr ? sharded_->optimizer(0).state_dict().kind : optimizer_->state_dict().kind;
    check_state_follows_the_steps(kCaller, checkpoint.optimizer, kind, checkpoint.step, parameters, path);
  }
  check_undamaged(kCaller, checkpoint, path);
  load_optimizer_state(kCaller, path, [&] {
    if (sharded_ != nullptr) {
      parallel::scatter_optimizer_state(*sharded_, checkpoint.optimizer);
    } else if (version3) {
      optimizer_->set_state(momentum_buffers);
    } else {
      optimizer_->load_state_dict(checkpoint.optimizer);
    }
  });

  write(slots, values);
  if (distributed_) {
    distributed_->sync_parameters();  // rank 0's values, to every process and replica
  } else {
    replicas_->sync_parameters();
  }
  (distributed_ ? distributed_->replicated() : *replicas_).sync_buffers();  // each process read the same buffers
  epoch_ = checkpoint.epoch;
  step_ = checkpoint.step;
  shuffle_state_ = checkpoint.shuffle_state;
  standardizer_ = checkpoint.standardizer;
  resumed_ = Resumed{path, checkpoint.setup.at("train_data")};
  train_data_ = resumed_->train_data;
  set_generator_state(checkpoint.generator);
  last_checkpoint_ = WrittenCheckpoint{path, epoch_};
}

}  // namespace tandem::trainers
