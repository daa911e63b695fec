#include "checkpoint_restore.h"

#include <cmath>
#include <map>
#include <optional>

#include "tandem/core/error.h"
#include "tandem/core/grad_mode.h"

namespace tandem::trainers::checkpoint_restore {

std::vector<Expected> expected(const std::vector<std::pair<std::string, Tensor>>& named, const char* kind) {
  std::vector<Expected> slots;
  for (const auto& [name, tensor] : named) slots.push_back({name, tensor, kind});
  return slots;
}

std::vector<Expected> model_tensors(const nn::Module& model) {
  std::vector<Expected> slots = expected(model.named_parameters(), "parameter");
  for (Expected& slot : expected(model.named_buffers(), "buffer")) slots.push_back(std::move(slot));
  return slots;
}

void check_finite(const char* caller, const Tensor& tensor, const std::string& what, const std::string& path) {
  if (!is_floating_point(tensor.dtype())) return;
  const std::vector<float> values = tensor.to(DType::Float32).to_vector();
  for (size_t i = 0; i < values.size(); ++i) {
    TANDEM_CHECK(std::isfinite(values[i]), caller, ": '", path, "' holds ", values[i], " at element ", i, " of ", what,
                 "; the checkpoint is corrupt (a run stops before it would save non-finite values)");
  }
}

void check_finite(const char* caller, const optim::OptimizerState& state,
                  const std::vector<std::pair<std::string, Tensor>>& parameters, const std::string& path) {
  for (size_t i = 0; i < state.parameters.size(); ++i) {
    const std::string parameter = i < parameters.size() ? parameters[i].first : "#" + std::to_string(i);
    for (const auto& [slot, tensor] : state.parameters[i].tensors) {
      check_finite(caller, tensor, "optimizer state " + slot + " of parameter " + parameter, path);
    }
  }
}

std::vector<Tensor> matched(const char* caller, const std::vector<Expected>& slots,
                            const std::vector<std::pair<std::string, Tensor>>& stored, const char* stored_kind,
                            const std::string& path, bool check_values) {
  std::map<std::string, size_t> index;
  for (size_t i = 0; i < slots.size(); ++i) index[slots[i].name] = i;
  std::vector<Tensor> values(slots.size());
  for (const auto& [name, tensor] : stored) {
    const auto found = index.find(name);
    TANDEM_CHECK(found != index.end(), caller, ": '", path, "' has a ", stored_kind, " for ", excerpt(name),
                 " which the model does not have");
    const Expected& slot = slots[found->second];
    TANDEM_CHECK(tensor.shape() == slot.tensor.shape(), caller, ": ", slot.kind, " ", name, " has shape ",
                 to_string(tensor.shape()), " in '", path, "' but ", to_string(slot.tensor.shape()), " in the model");
    TANDEM_CHECK(tensor.dtype() == slot.tensor.dtype(), caller, ": ", slot.kind, " ", name, " is ", tensor.dtype(),
                 " in '", path, "' but ", slot.tensor.dtype(), " in the model");
    if (check_values) check_finite(caller, tensor, std::string(slot.kind) + " " + name, path);
    values[found->second] = tensor;
  }
  return values;
}

std::vector<Tensor> matched_all(const char* caller, const std::vector<Expected>& slots,
                                const std::vector<std::pair<std::string, Tensor>>& stored, const std::string& path,
                                bool check_values) {
  std::vector<Tensor> values = matched(caller, slots, stored, "model tensor", path, check_values);
  for (size_t i = 0; i < slots.size(); ++i) {
    TANDEM_CHECK(values[i].defined(), caller, ": '", path, "' has no ", slots[i].kind, " ", slots[i].name);
  }
  return values;
}

void check_state_follows_the_steps(const char* caller, const optim::OptimizerState& state,
                                   const std::string& optimizer_kind, int64_t step,
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
      TANDEM_CHECK(steps == (trainable ? step : 0), caller, ": '", path, "' holds ", state.kind,
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
    TANDEM_FAIL(caller, ": '", path, "' holds a momentum buffer for ", parameters[*with_buffer].first,
                " but none for ", parameters[*without_buffer].first,
                "; every step updates every trainable parameter, so the file is not a checkpoint of this run");
  }
  TANDEM_CHECK(!(with_buffer && step == 0), caller, ": '", path,
               "' holds momentum buffers at step 0, before any step could make them");
}

void check_undamaged(const char* caller, const Checkpoint& checkpoint, const std::string& path) {
  TANDEM_CHECK(checkpoint.checksum == checkpoint.recorded_checksum, caller, ": '", path,
               "' is damaged: its data's checksum is ", checkpoint.checksum, " but it recorded ",
               checkpoint.recorded_checksum, " when it was written (changed, or cut short, since)");
}

void refuse_other_setup(const char* caller, const std::string& path, const SetupFacts& recorded,
                      const SetupFacts& current, const std::set<std::string>& ignored, const std::string& advice) {
  const std::vector<std::string> differences = setup_differences(recorded, current, ignored);
  if (differences.empty()) return;
  std::string list;
  for (const std::string& difference : differences) list += (list.empty() ? "" : "; ") + difference;
  throw SetupMismatch(std::string(caller) + ": '" + path + "' belongs to another setup: " + list + " (" + advice +
                      ")");
}

std::vector<std::pair<std::string, Tensor>> model_state(const nn::Module& model) {
  std::vector<std::pair<std::string, Tensor>> state;
  for (const auto& [names, tensor] : model.state_tensors()) state.emplace_back(names.front(), tensor);
  return state;
}

void write(const std::vector<Expected>& slots, const std::vector<Tensor>& values) {
  NoGradGuard no_grad;
  for (size_t i = 0; i < slots.size(); ++i) {
    Tensor target = slots[i].tensor;  // the model's own storage
    target.copy_(values[i]);
  }
}

}  // namespace tandem::trainers::checkpoint_restore
