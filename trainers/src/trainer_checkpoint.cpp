// The Trainer's setup facts, and its checkpoints: what a run records of itself, written, and read back all or
// nothing on a resume (Note [All-or-nothing resume]).
#include <algorithm>
#include <cmath>
#include <map>
#include <set>

#include "tandem/core/error.h"
#include "tandem/core/grad_mode.h"
#include "tandem/core/random.h"
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
  for (const optim::ParameterState& parameter : optimizer_->state_dict().parameters) {
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

void Trainer::save_checkpoint(const std::string& path) const {
  TANDEM_CHECK(standardizer_.has_value(), "Trainer::save_checkpoint: nothing to save before fit()");
  Checkpoint checkpoint;
  // Each tensor once, under the name named_parameters() or named_buffers() gives it, which a resume looks for
  // (Note [Shared parameters] in nn/module.h).
  for (const auto& [names, tensor] : model_->state_tensors())
    checkpoint.model_state.emplace_back(names.front(), tensor);
  checkpoint.optimizer = optimizer_->state_dict();
  checkpoint.epoch = epoch_;
  checkpoint.step = step_;
  checkpoint.generator = generator_state();
  checkpoint.shuffle_state = shuffle_state_;
  checkpoint.standardizer = *standardizer_;
  checkpoint.setup = setup();
  if (primary()) trainers::save_checkpoint(checkpoint, path);
  last_checkpoint_ = WrittenCheckpoint{path, epoch_};
}

namespace {

// Throws unless every element of `tensor` is finite (integer tensors always are), naming the first that is not.
void check_finite(const Tensor& tensor, const std::string& what, const std::string& path) {
  if (!is_floating_point(tensor.dtype())) return;
  const std::vector<float> values = tensor.to(DType::Float32).to_vector();
  for (size_t i = 0; i < values.size(); ++i) {
    TANDEM_CHECK(std::isfinite(values[i]), "Trainer::load_checkpoint: '", path, "' holds ", values[i], " at element ",
                 i, " of ", what, "; the checkpoint is corrupt (a run stops before it would save non-finite values)");
  }
}

// A tensor the model expects in a checkpoint: a parameter, a buffer or (version 3) a parameter's momentum buffer.
struct Expected {
  std::string name;
  Tensor tensor;  // the model's: the shape and dtype the checkpoint's must have
  const char* kind;
};

std::vector<Expected> expected(const std::vector<std::pair<std::string, Tensor>>& named, const char* kind) {
  std::vector<Expected> slots;
  for (const auto& [name, tensor] : named) slots.push_back({name, tensor, kind});
  return slots;
}

// The checkpoint's tensors in the order of `slots`, checked by name, shape, dtype and finite values; entries stay
// undefined for names the checkpoint does not hold. `stored_kind` names the checkpoint's tensors in messages.
std::vector<Tensor> matched(const std::vector<Expected>& slots,
                            const std::vector<std::pair<std::string, Tensor>>& stored, const char* stored_kind,
                            const std::string& path, bool check_values) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < slots.size(); ++i) index[slots[i].name] = i;
  std::vector<Tensor> values(slots.size());
  for (const auto& [name, tensor] : stored) {
    const auto found = index.find(name);
    TANDEM_CHECK(found != index.end(), "Trainer::load_checkpoint: '", path, "' has a ", stored_kind, " for ",
                 excerpt(name), " which the model does not have");
    const Expected& slot = slots[found->second];
    TANDEM_CHECK(tensor.shape() == slot.tensor.shape(), "Trainer::load_checkpoint: ", slot.kind, " ", name,
                 " has shape ", to_string(tensor.shape()), " in '", path, "' but ", to_string(slot.tensor.shape()),
                 " in the model");
    TANDEM_CHECK(tensor.dtype() == slot.tensor.dtype(), "Trainer::load_checkpoint: ", slot.kind, " ", name, " is ",
                 tensor.dtype(), " in '", path, "' but ", slot.tensor.dtype(), " in the model");
    if (check_values) check_finite(tensor, std::string(slot.kind) + " " + name, path);
    values[found->second] = tensor;
  }
  return values;
}

// Every value of the optimizer state finite, each named by its parameter (the state's count and shapes are checked
// by the optimizer's load_state_dict).
void check_finite(const optim::OptimizerState& state, const std::vector<std::pair<std::string, Tensor>>& parameters,
                  const std::string& path) {
  for (size_t i = 0; i < state.parameters.size(); ++i) {
    const std::string parameter = i < parameters.size() ? parameters[i].first : "#" + std::to_string(i);
    for (const auto& [slot, tensor] : state.parameters[i].tensors) {
      check_finite(tensor, "optimizer state " + slot + " of parameter " + parameter, path);
    }
  }
}

// The optimizer state of a Trainer's run follows its step count: every step updates every trainable parameter (each
// has a gradient view), so Adam's and AdamW's counts equal the trainer's step (0 for frozen parameters), and SGD has
// a momentum buffer either for every trainable parameter or, before its first step, for none.
void check_state_follows_the_steps(const optim::OptimizerState& state, const std::string& optimizer_kind, int64_t step,
                                   const std::vector<std::pair<std::string, Tensor>>& parameters,
                                   const std::string& path) {
  // Another kind or count is the optimizer's load_state_dict to name.
  if (state.kind != optimizer_kind || state.parameters.size() != parameters.size()) return;
  const bool adam = state.kind == "optim::Adam" || state.kind == "optim::AdamW";
  std::optional<size_t> with_buffer;
  std::optional<size_t> without_buffer;
  for (size_t i = 0; i < parameters.size(); ++i) {
    const bool trainable = parameters[i].second.requires_grad();
    const int64_t steps = state.parameters[i].step;
    if (adam) {
      TANDEM_CHECK(steps == (trainable ? step : 0), "Trainer::load_checkpoint: '", path, "' holds ", state.kind,
                   " state whose parameter ", parameters[i].first, " has taken ", steps, " steps, but the trainer ",
                   step, (trainable ? "" : " and the parameter is frozen (0 expected)"),
                   "; every step updates every trainable parameter, so the file is not a checkpoint of this run");
    }
    if (state.kind == "optim::SGD" && trainable) {
      std::optional<size_t>& first = state.parameters[i].tensors.empty() ? without_buffer : with_buffer;
      if (!first) first = i;
    }
  }
  if (with_buffer && without_buffer) {
    TANDEM_FAIL("Trainer::load_checkpoint: '", path, "' holds a momentum buffer for ", parameters[*with_buffer].first,
                " but none for ", parameters[*without_buffer].first,
                "; every step updates every trainable parameter, so the file is not a checkpoint of this run");
  }
  TANDEM_CHECK(!(with_buffer && step == 0), "Trainer::load_checkpoint: '", path,
               "' holds momentum buffers at step 0, before any step could make them");
}

}  // namespace

void Trainer::load_checkpoint(const std::string& path) {
  // Note [All-or-nothing resume]: everything that can be wrong with the file is checked before the first write to
  // the model, the optimizer or the counters, so a refused checkpoint leaves the Trainer exactly as it was. The
  // optimizer's load_state_dict (set_state for version 3) is the last check and the first write: it checks the whole
  // state before it writes anything, and every replica's optimizer takes the same state over parameters of the same
  // shapes, so once the first accepts it, the rest does too.
  Checkpoint checkpoint = trainers::load_checkpoint(path);
  const std::vector<std::string> differences = setup_differences(checkpoint.setup, setup(), [&] {
    std::set<std::string> ignored = options_.resume_may_change;
    ignored.insert("train_data");  // compared when fit() sees the data
    return ignored;
  }());
  if (!differences.empty()) {
    std::string list;
    for (const std::string& difference : differences) list += (list.empty() ? "" : "; ") + difference;
    throw SetupMismatch("Trainer::load_checkpoint: '" + path + "' belongs to another setup: " + list +
                        " (only lr and epochs may be allowed to change, through resume_may_change)");
  }
  TANDEM_CHECK(checkpoint.setup.contains("train_data"), "Trainer::load_checkpoint: '", path,
               "' records no train_data fact (every checkpoint of a fit does)");
  TANDEM_CHECK(checkpoint.epoch <= options_.epochs, "Trainer::load_checkpoint: '", path, "' is at epoch ",
               checkpoint.epoch, " but epochs is ", options_.epochs,
               "; epochs counts all epochs (those before a resume too)");

  const auto parameters = model_->named_parameters();
  const auto buffers = model_->named_buffers();
  const bool version3 = checkpoint.version == 3;
  if (version3 && !buffers.empty()) {
    TANDEM_FAIL("Trainer::load_checkpoint: '", path, "' is a version 3 checkpoint, which keeps no buffers, but the ",
                "model has ", buffers.size(), " (", buffers.front().first, ", ...); its running statistics cannot be ",
                "restored, so the run would not continue exactly");
  }
  std::vector<Expected> slots = expected(parameters, "parameter");
  for (Expected& slot : expected(buffers, "buffer")) slots.push_back(std::move(slot));
  // Note [Checkpoint checksums] in checkpoint.cpp: a checksum, when the file has one, tells damage; older files are
  // checked for the values a run never saves instead.
  const bool with_checksum = !checkpoint.recorded_checksum.empty();
  const std::vector<Tensor> values = matched(slots, checkpoint.model_state, "model tensor", path, !with_checksum);
  for (size_t i = 0; i < slots.size(); ++i) {
    TANDEM_CHECK(values[i].defined(), "Trainer::load_checkpoint: '", path, "' has no ", slots[i].kind, " ",
                 slots[i].name);
  }
  const std::vector<Tensor> momentum_buffers =
      matched(expected(parameters, "momentum buffer"), checkpoint.momentum_buffers, "momentum buffer", path, true);
  if (!version3) {
    if (!with_checksum) check_finite(checkpoint.optimizer, parameters, path);
    check_state_follows_the_steps(checkpoint.optimizer, optimizer_->state_dict().kind, checkpoint.step, parameters,
                                  path);
  }
  TANDEM_CHECK(checkpoint.checksum == checkpoint.recorded_checksum, "Trainer::load_checkpoint: '", path,
               "' is damaged: its data's checksum is ", checkpoint.checksum, " but it recorded ",
               checkpoint.recorded_checksum, " when it was written (changed, or cut short, since)");
  try {
    if (version3) {
      optimizer_->set_state(momentum_buffers);
    } else {
      optimizer_->load_state_dict(checkpoint.optimizer);
    }
  } catch (const InternalError&) {
    throw;
  } catch (const Error& e) {
    TANDEM_FAIL("Trainer::load_checkpoint: '", path,
                "' holds an optimizer state that does not fit the optimizer: ", e.what());
  }

  {
    NoGradGuard no_grad;
    for (size_t i = 0; i < slots.size(); ++i) slots[i].tensor.copy_(values[i]);
  }
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
