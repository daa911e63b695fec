#include "tandem/optim/optimizer_state.h"

#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string_view>

#include "json/untrusted_json.h"
#include "tandem/core/error.h"

namespace tandem::optim {
namespace {

constexpr const char* kOptimizerStateKey = "tandem.optimizer";
constexpr const char* kFormat = "tandem-optimizer-state";
constexpr std::string_view kTensorPrefix = "optimizer.";
// Bounds of the metadata: far above any real optimizer, low enough that a hostile file cannot make us allocate much.
constexpr size_t kMaxParameters = 1'000'000;
constexpr size_t kMaxKindChars = 200;
constexpr uint64_t kMaxCount = std::numeric_limits<int64_t>::max();

using Json = nlohmann::json;

std::string type_of(const Json& value) { return std::string("a JSON ") + value.type_name(); }

uint64_t count_in(const Json& value, const std::string& where, const std::string& name, uint64_t max = kMaxCount) {
  TANDEM_CHECK(value.is_number_unsigned() && value.get<uint64_t>() <= max, where, name, " is ", excerpt(value.dump()),
               " but expected an integer in [0, ", max, "]");
  return value.get<uint64_t>();
}

// The metadata object, field by field: exactly format, kind, version and steps.
OptimizerState parse_metadata(const std::string& text, const std::string& where) {
  const Json meta = json::parse_untrusted(text, where);
  TANDEM_CHECK(meta.is_object(), where, "the metadata is ", type_of(meta), " but expected an object");
  for (const auto& [key, unused] : meta.items()) {
    TANDEM_CHECK(key == "format" || key == "kind" || key == "version" || key == "steps", where,
                 "the metadata has an unexpected field \"", excerpt(key), "\"");
  }
  for (const char* key : {"format", "kind", "version", "steps"})
    TANDEM_CHECK(meta.contains(key), where, "the field \"", key, "\" is missing");
  const Json& format = meta["format"];
  TANDEM_CHECK(format == kFormat, where, "format is ", excerpt(format.dump()), " but expected \"", kFormat, "\"");
  const Json& kind = meta["kind"];
  TANDEM_CHECK(kind.is_string() && kind.get_ref<const std::string&>().size() <= kMaxKindChars, where, "kind is ",
               excerpt(kind.dump()), " but expected a string of at most ", kMaxKindChars, " characters");
  const Json& steps = meta["steps"];
  TANDEM_CHECK(steps.is_array() && steps.size() <= kMaxParameters, where, "steps is ", type_of(steps),
               steps.is_array() ? " of " + std::to_string(steps.size()) + " entries" : "",
               " but expected an array of at most ", kMaxParameters, " step counts");
  OptimizerState state;
  state.kind = kind.get<std::string>();
  state.version = static_cast<int64_t>(count_in(meta["version"], where, "version"));
  state.parameters.resize(steps.size());
  for (size_t i = 0; i < steps.size(); ++i) {
    state.parameters[i].step =
        static_cast<int64_t>(count_in(steps[i], where, "steps[" + std::to_string(i) + "]", kMaxSteps));
  }
  return state;
}

// Splits "<index>.<slot>" (the name without the prefix); false unless the index is canonical decimal below `count`
// and the slot is not empty.
bool split_name(std::string_view rest, size_t count, size_t& index, std::string& slot) {
  const size_t dot = rest.find('.');
  if (dot == std::string_view::npos || dot == 0 || dot > 7 || dot + 1 == rest.size()) return false;
  if (rest[0] == '0' && dot > 1) return false;
  index = 0;
  for (size_t i = 0; i < dot; ++i) {
    if (rest[i] < '0' || rest[i] > '9') return false;
    index = index * 10 + static_cast<size_t>(rest[i] - '0');
  }
  slot = std::string(rest.substr(dot + 1));
  return index < count;
}

}  // namespace

std::string optimizer_tensor_name(size_t parameter, const std::string& slot) {
  return std::string(kTensorPrefix) + std::to_string(parameter) + "." + slot;
}

StreamedOptimizerState streamed(const OptimizerState& state) {
  StreamedOptimizerState out{state.kind, state.version, {}, {}};
  for (size_t i = 0; i < state.parameters.size(); ++i) {
    const ParameterState& parameter = state.parameters[i];
    TANDEM_CHECK(parameter.step >= 0 && parameter.step <= kMaxSteps, "write_optimizer_state: parameter ", i,
                 " has step ", parameter.step, " but expected a count in [0, ", kMaxSteps, "]");
    out.steps.push_back(parameter.step);
    std::set<std::string> slots;
    for (const auto& [slot, tensor] : parameter.tensors) {
      TANDEM_CHECK(!slot.empty() && slots.insert(slot).second, "write_optimizer_state: parameter ", i,
                   " has an empty or repeated slot name \"", excerpt(slot), "\"");
      TANDEM_CHECK(tensor.defined(), "write_optimizer_state: parameter ", i, " slot ", excerpt(slot), " is undefined");
      out.slots.push_back({i, slot, {optimizer_tensor_name(i, slot), tensor.dtype(), tensor.shape(), [tensor = tensor] {
                                       return tensor;
                                     }}});
    }
  }
  return out;
}

void drain(const StreamedOptimizerState& state) {
  for (const StreamedSlot& slot : state.slots) slot.tensor.values();
}

void add_optimizer_metadata(const StreamedOptimizerState& state, std::map<std::string, std::string>& metadata) {
  TANDEM_CHECK(!metadata.contains(kOptimizerStateKey), "write_optimizer_state: the file already holds an optimizer ",
               "state (metadata \"", kOptimizerStateKey, "\")");
  const Json meta = {{"format", kFormat}, {"kind", state.kind}, {"version", state.version}, {"steps", state.steps}};
  metadata[kOptimizerStateKey] = meta.dump();
}

void write_optimizer_state(const OptimizerState& state, TensorFile& file) {
  const StreamedOptimizerState stream = streamed(state);
  add_optimizer_metadata(stream, file.metadata);
  for (const StreamedSlot& slot : stream.slots) file.tensors.emplace_back(slot.tensor.name, slot.tensor.values());
}

OptimizerState read_optimizer_state(TensorFile& file, const std::string& source) {
  const auto entry = file.metadata.find(kOptimizerStateKey);
  TANDEM_CHECK(entry != file.metadata.end(), source, ": holds no optimizer state (no \"", kOptimizerStateKey,
               "\" metadata)");
  OptimizerState state = parse_metadata(entry->second, source + ": metadata " + kOptimizerStateKey + ": ");
  std::vector<std::pair<std::string, Tensor>> others;
  for (auto& [name, tensor] : file.tensors) {
    if (!name.starts_with(kTensorPrefix)) {
      others.emplace_back(std::move(name), std::move(tensor));
      continue;
    }
    size_t index = 0;
    std::string slot;
    TANDEM_CHECK(split_name(std::string_view(name).substr(kTensorPrefix.size()), state.parameters.size(), index, slot),
                 source, ": the tensor \"", excerpt(name), "\" is not named ", kTensorPrefix,
                 "<parameter index>.<slot> with an index below the ", state.parameters.size(), " parameters");
    state.parameters[index].tensors.emplace_back(std::move(slot), std::move(tensor));
  }
  file.tensors = std::move(others);
  file.metadata.erase(entry);
  return state;
}

void save_optimizer_state(const OptimizerState& state, const std::string& path) {
  TensorFile file;
  write_optimizer_state(state, file);
  save_tensors(file.tensors, path, file.metadata);
}

OptimizerState load_optimizer_state(const std::string& path) {
  TensorFile file = load_tensors(path);
  const std::string source = "load_optimizer_state: '" + path + "'";
  OptimizerState state = read_optimizer_state(file, source);
  TANDEM_CHECK(file.tensors.empty(), source, " has an unexpected tensor \"", excerpt(file.tensors.front().first), "\"");
  return state;
}

}  // namespace tandem::optim
