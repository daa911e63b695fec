#include "tandem/trainers/checkpoint.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>

#include "json/untrusted_json.h"
#include "tandem/core/error.h"
#include "tandem/core/fnv1a.h"
#include "tandem/nn/serialize.h"

namespace tandem::trainers {
namespace {

constexpr const char* kMetadataKey = "tandem.trainer";
constexpr const char* kFormat = "tandem-trainer-checkpoint";
// 3: the generator's device streams; 4: the model's buffers and the optimizer's state by name; 5: the checksum of
// the data (checkpoint.h).
constexpr int64_t kOldestVersion = 3;
constexpr std::string_view kModelPrefix = "model.";
constexpr std::string_view kMomentumPrefix = "momentum.";          // version 3
constexpr const char* kOptimizerMetadataKey = "tandem.optimizer";  // optim::write_optimizer_state's
constexpr int64_t kFirstVersionWithChecksum = 5;
// Bounds of the metadata: far above any real run, low enough that a hostile file cannot make us allocate much.
constexpr size_t kMaxFeatures = 1'000'000;
constexpr size_t kMaxSetupFacts = 1'000;
constexpr size_t kMaxGeneratorStreams = 1'000;

constexpr uint64_t kAnyU64 = std::numeric_limits<uint64_t>::max();

using Json = nlohmann::json;

// Reads the trainer metadata field by field: every field must be present with its type and range, and no other
// field may be there. Every failure is an Error that starts with `where` and names the field.
class MetadataReader {
 public:
  explicit MetadataReader(std::string where) : where_(std::move(where)) {}

  const Json& object(const Json& parent, const char* key, std::initializer_list<const char*> fields) const {
    const Json& value = field(parent, key);
    expect_object(value, key, fields);
    return value;
  }
  void expect_object(const Json& value, const std::string& name, std::initializer_list<const char*> fields) const {
    TANDEM_CHECK(value.is_object(), where_, name, " is ", type(value), " but expected an object");
    for (const auto& [key, unused] : value.items()) {
      bool known = false;
      for (const char* expected : fields) known = known || key == expected;
      TANDEM_CHECK(known, where_, name, " has an unexpected field \"", excerpt(key), "\"");
    }
  }
  const Json& field(const Json& parent, const char* key) const {
    const auto found = parent.find(key);
    TANDEM_CHECK(found != parent.end(), where_, "the field \"", key, "\" is missing");
    return *found;
  }
  std::string string(const Json& parent, const char* key) const {
    const Json& value = field(parent, key);
    TANDEM_CHECK(value.is_string(), where_, key, " is ", type(value), " but expected a string");
    return value.get<std::string>();
  }
  // An integer in [0, max]: floats such as 1e30 or 2.5 are refused rather than converted.
  uint64_t count(const Json& parent, const char* key, uint64_t max) const {
    return integer(field(parent, key), key, max);
  }
  uint64_t integer(const Json& value, const std::string& name, uint64_t max) const {
    TANDEM_CHECK(value.is_number_unsigned() && value.get<uint64_t>() <= max, where_, name, " is ",
                 excerpt(value.dump()), " but expected an integer in [0, ", max, "]");
    return value.get<uint64_t>();
  }
  // An object of at most kMaxGeneratorStreams counters by device name, each name as Device::str() writes it.
  std::map<Device, uint64_t> device_counters(const Json& parent, const char* key) const {
    const Json& value = field(parent, key);
    TANDEM_CHECK(value.is_object() && value.size() <= kMaxGeneratorStreams, where_, key, " is ", type(value),
                 value.is_object() ? " of " + std::to_string(value.size()) + " entries" : "",
                 " but expected an object of at most ", kMaxGeneratorStreams, " counters by device");
    std::map<Device, uint64_t> counters;
    for (const auto& [name, counter] : value.items()) {
      const Device device = device_key(name, key);
      counters[device] = integer(counter, std::string(key) + "[\"" + name + "\"]", kAnyU64);
    }
    return counters;
  }
  Device device_key(const std::string& name, const char* key) const {
    std::optional<Device> device;
    try {
      device = Device::parse(name);
    } catch (const Error&) {  // reported below, with the name quoted safely
    }
    TANDEM_CHECK(device && device->str() == name, where_, key, " has the key \"", excerpt(name),
                 "\" but expected a device such as \"cpu:1\" or \"cuda:0\"");
    return *device;
  }
  double finite(const Json& value, const std::string& name) const {
    TANDEM_CHECK(value.is_number() && std::isfinite(value.get<double>()), where_, name, " is ", excerpt(value.dump()),
                 " but expected a finite number");
    return value.get<double>();
  }
  // A standard deviation as the standardizer computes it: a square root, so never subnormal (the smallest root of a
  // positive double is about 2e-162); a subnormal or zero scale can only come from a damaged file.
  double positive(const Json& value, const std::string& name) const {
    const double number = finite(value, name);
    TANDEM_CHECK(number >= std::numeric_limits<double>::min(), where_, name, " is ", number,
                 " but expected a positive number of normal size (a standard deviation)");
    return number;
  }
  std::vector<double> numbers(const Json& parent, const char* key, bool positive_only) const {
    const Json& value = field(parent, key);
    TANDEM_CHECK(value.is_array() && !value.empty() && value.size() <= kMaxFeatures, where_, key, " is ", type(value),
                 value.is_array() ? " of " + std::to_string(value.size()) + " entries" : "",
                 " but expected an array of 1 to ", kMaxFeatures, " numbers");
    std::vector<double> numbers;
    for (size_t i = 0; i < value.size(); ++i) {
      const std::string name = std::string(key) + "[" + std::to_string(i) + "]";
      numbers.push_back(positive_only ? positive(value[i], name) : finite(value[i], name));
    }
    return numbers;
  }
  const std::string& where() const { return where_; }

 private:
  static std::string type(const Json& value) { return std::string("a JSON ") + value.type_name(); }
  std::string where_;
};

// A language model's progress after `step` steps: its evaluations at increasing steps in [1, step], at most one per
// step, their losses finite.
LanguageModelProgress read_language_model(const MetadataReader& read, const Json& state, int64_t step) {
  const Json& value = read.object(state, "language_model", {"train_draws", "eval_draws", "evaluations"});
  LanguageModelProgress progress;
  progress.train_draws = read.count(value, "train_draws", kAnyU64);
  progress.eval_draws = read.count(value, "eval_draws", kAnyU64);
  const Json& evaluations = read.field(value, "evaluations");
  TANDEM_CHECK(evaluations.is_array() && evaluations.size() <= static_cast<uint64_t>(step), read.where(),
               "evaluations is not an array of at most ", step, " evaluations (one per step at most)");
  for (size_t i = 0; i < evaluations.size(); ++i) {
    const std::string name = "evaluations[" + std::to_string(i) + "]";
    read.expect_object(evaluations[i], name, {"step", "train_loss", "val_loss"});
    LanguageModelEvaluation& e = progress.evaluations.emplace_back();
    e.step = static_cast<int64_t>(read.count(evaluations[i], "step", static_cast<uint64_t>(step)));
    const int64_t previous = i == 0 ? 0 : progress.evaluations[i - 1].step;
    TANDEM_CHECK(e.step > previous, read.where(), name, " is at step ", e.step, " but expected a step after ",
                 previous);
    e.train_loss = read.finite(read.field(evaluations[i], "train_loss"), name + ".train_loss");
    e.val_loss = read.finite(read.field(evaluations[i], "val_loss"), name + ".val_loss");
  }
  return progress;
}

void read_metadata(const std::string& text, const std::string& path, Checkpoint& checkpoint) {
  const MetadataReader read("load_checkpoint: '" + path + "': metadata " + kMetadataKey + ": ");
  const Json state = json::parse_untrusted(text, read.where());
  read.expect_object(state, "the metadata",
                     {"format", "version", "epoch", "step", "generator", "shuffle_state", "standardizer",
                      "language_model", "setup", "checksum"});
  const std::string format = read.string(state, "format");
  const uint64_t version = read.count(state, "version", std::numeric_limits<int64_t>::max());
  TANDEM_CHECK(
      format == kFormat && version >= kOldestVersion && version <= kCheckpointVersion, read.where(), "format \"",
      excerpt(format), "\" version ", version, " but expected \"", kFormat, "\" version ", kOldestVersion, " to ",
      kCheckpointVersion,
      version < kOldestVersion && format == kFormat ? " (written by an older tandem; retrain or convert it)" : "");
  checkpoint.version = static_cast<int64_t>(version);
  const bool with_checksum = checkpoint.version >= kFirstVersionWithChecksum;
  TANDEM_CHECK(with_checksum || !state.contains("checksum"), read.where(), "a version ", version,
               " checkpoint has a checksum, which only version ", kFirstVersionWithChecksum, " and later have");
  if (with_checksum) {
    checkpoint.recorded_checksum = read.string(state, "checksum");
    TANDEM_CHECK(checkpoint.recorded_checksum.size() == 16 &&
                     checkpoint.recorded_checksum.find_first_not_of("0123456789abcdef") == std::string::npos,
                 read.where(), "checksum is \"", excerpt(checkpoint.recorded_checksum),
                 "\" but expected 16 lowercase hexadecimal digits");
  }

  // Exact in a float64, and so far from int64's end that training on from it never overflows.
  constexpr uint64_t kMaxCounter = uint64_t{1} << 53;
  checkpoint.epoch = static_cast<int64_t>(read.count(state, "epoch", kMaxCounter));
  checkpoint.step = static_cast<int64_t>(read.count(state, "step", kMaxCounter));
  TANDEM_CHECK(checkpoint.step >= checkpoint.epoch, read.where(), "step is ", checkpoint.step, " but epoch is ",
               checkpoint.epoch, "; every epoch takes at least one step");
  const Json& generator = read.object(state, "generator", {"seed", "counter", "device_counters"});
  checkpoint.generator.seed = read.count(generator, "seed", kAnyU64);
  checkpoint.generator.counter = read.count(generator, "counter", kAnyU64);
  checkpoint.generator.device_counters = read.device_counters(generator, "device_counters");
  checkpoint.shuffle_state = read.count(state, "shuffle_state", kAnyU64);

  // A Trainer's checkpoint has the standardization, a language model's its progress: one of the two.
  const bool language_model = state.contains("language_model");
  TANDEM_CHECK(language_model != state.contains("standardizer"), read.where(),
               language_model ? "both the fields \"standardizer\" and \"language_model\" are there"
                              : "the field \"standardizer\" is missing",
               language_model ? " but a checkpoint has one of them" : "");
  if (language_model) {
    TANDEM_CHECK(with_checksum, read.where(), "a version ", version, " checkpoint has the field \"language_model\", ",
                 "which only version ", kFirstVersionWithChecksum, " and later have");
    TANDEM_CHECK(checkpoint.epoch == 0 && checkpoint.shuffle_state == 0, read.where(), "a language model's epoch (",
                 checkpoint.epoch, ") and shuffle_state (", checkpoint.shuffle_state, ") must be 0");
    checkpoint.language_model = read_language_model(read, state, checkpoint.step);
  } else {
    const Json& s =
        read.object(state, "standardizer", {"feature_mean", "feature_scale", "target_mean", "target_scale"});
    Standardizer& standardizer = checkpoint.standardizer;
    standardizer.feature_mean = read.numbers(s, "feature_mean", /*positive_only=*/false);
    standardizer.feature_scale = read.numbers(s, "feature_scale", /*positive_only=*/true);
    TANDEM_CHECK(standardizer.feature_mean.size() == standardizer.feature_scale.size(), read.where(),
                 "feature_mean has ", standardizer.feature_mean.size(), " entries but feature_scale has ",
                 standardizer.feature_scale.size());
    standardizer.target_mean = read.finite(read.field(s, "target_mean"), "target_mean");
    standardizer.target_scale = read.positive(read.field(s, "target_scale"), "target_scale");
  }

  const Json& setup = read.field(state, "setup");
  TANDEM_CHECK(setup.is_object() && setup.size() <= kMaxSetupFacts, read.where(), "setup is not an object of at most ",
               kMaxSetupFacts, " facts");
  for (const auto& [name, value] : setup.items()) {
    TANDEM_CHECK(value.is_string(), read.where(), "setup fact \"", excerpt(name), "\" is not a string");
    checkpoint.setup[name] = value.get<std::string>();
  }
}

// Note [Checkpoint checksums]: a checkpoint records, when it is written, an FNV-1a hash of its data: every tensor (its
// name, dtype, shape and bytes) and the optimizer's metadata. A resume computes it again and refuses a file whose data
// changed since (a damaged disk, a truncated copy, a hand edit), before anything is applied. So no value is taken for
// a sign of damage: a buffer that holds -inf or NaN on purpose (a causal mask) loads as it was written. Files of
// versions before 5 have no checksum; for them the resume still refuses non-finite values.
//   - Version 6 hashes each tensor on its own (add_tensor) and then, in name order, each name with its tensor's hash,
//     then the optimizer's metadata: the writer hashes every tensor as it streams past (Note [Sealed headers] in
//     nn/src/serialize.cpp puts the result in the header that precedes them), in whatever order the file holds them.
//   - Version 5's checksum, still verified, hashes the names and data of all tensors one after another in name
//     order, which needs them all at once.

void add_text(Fnv1a& hash, const std::string& text) {
  hash.add(text);
  hash.add("", 1);  // a NUL after each text, so that ("ab", "c") and ("a", "bc") differ
}

std::string hex_of(const Fnv1a& hash) {
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(hash.value()));
  return hex;
}

uint64_t tensor_hash(const Tensor& tensor) {
  Fnv1a hash;
  add_tensor(hash, tensor);
  return hash.value();
}

// Version 6's checksum of tensors hashed by name.
std::string combined_checksum(const std::map<std::string, uint64_t>& tensor_hashes,
                              const std::string& optimizer_metadata) {
  Fnv1a hash;
  for (const auto& [name, value] : tensor_hashes) {
    add_text(hash, name);
    hash.add_word(value);
  }
  add_text(hash, optimizer_metadata);
  return hex_of(hash);
}

std::string optimizer_metadata_of(const std::map<std::string, std::string>& metadata) {
  const auto optimizer = metadata.find(kOptimizerMetadataKey);
  return optimizer == metadata.end() ? std::string() : optimizer->second;
}

constexpr size_t kChecksumDigits = 16;

}  // namespace

std::string checkpoint_checksum(const TensorFile& file, int64_t version) {
  TANDEM_CHECK(version == kFirstVersionWithChecksum || version == kCheckpointVersion, "checkpoint_checksum: version ",
               version, " but checkpoints have checksums of versions ", kFirstVersionWithChecksum, " to ",
               kCheckpointVersion);
  if (version == kCheckpointVersion) {
    std::map<std::string, uint64_t> hashes;
    for (const auto& [name, tensor] : file.tensors) hashes[name] = tensor_hash(tensor);
    return combined_checksum(hashes, optimizer_metadata_of(file.metadata));
  }
  std::vector<const std::pair<std::string, Tensor>*> sorted;
  for (const auto& entry : file.tensors) sorted.push_back(&entry);
  std::sort(sorted.begin(), sorted.end(), [](const auto* a, const auto* b) { return a->first < b->first; });
  Fnv1a hash;
  for (const auto* entry : sorted) {
    add_text(hash, entry->first);
    add_tensor(hash, entry->second);
  }
  add_text(hash, optimizer_metadata_of(file.metadata));
  return hex_of(hash);
}

void save_checkpoint(const Checkpoint& checkpoint, const std::string& path) {
  save_checkpoint(checkpoint, optim::streamed(checkpoint.optimizer), path);
}

void save_checkpoint(const Checkpoint& checkpoint, const optim::StreamedOptimizerState& optimizer,
                     const std::string& path) {
  try {
    TANDEM_CHECK(checkpoint.version == kCheckpointVersion && checkpoint.momentum_buffers.empty(),
                 "save_checkpoint: got a version ", checkpoint.version, " checkpoint",
                 checkpoint.momentum_buffers.empty() ? "" : " with momentum_buffers", " but only version ",
                 kCheckpointVersion, " (the optimizer's state in `optimizer`) is written");
  } catch (const Error&) {
    optim::drain(optimizer);
    throw;
  }
  // Every tensor is hashed on the host as it goes to the file (the sources are asked within this call).
  std::map<std::string, uint64_t> hashes;
  const auto hashed = [&hashes](const TensorSource& source) {
    TensorSource out = source;
    out.values = [&hashes, name = source.name, values = source.values] {
      Tensor host = values().to(Device::cpu());
      hashes[name] = tensor_hash(host);
      return host;
    };
    return out;
  };
  std::vector<TensorSource> tensors;
  for (const auto& [name, tensor] : checkpoint.model_state) {
    tensors.push_back(hashed(
        {std::string(kModelPrefix) + name, tensor.dtype(), tensor.shape(), [tensor = tensor] { return tensor; }}));
  }
  for (const optim::StreamedSlot& slot : optimizer.slots) tensors.push_back(hashed(slot.tensor));
  std::map<std::string, std::string> metadata;
  optim::add_optimizer_metadata(optimizer, metadata);

  Json device_counters = Json::object();
  for (const auto& [device, counter] : checkpoint.generator.device_counters) device_counters[device.str()] = counter;
  Json state = {
      {"format", kFormat},
      {"version", kCheckpointVersion},
      {"epoch", checkpoint.epoch},
      {"step", checkpoint.step},
      {"generator",
       {{"seed", checkpoint.generator.seed},
        {"counter", checkpoint.generator.counter},
        {"device_counters", device_counters}}},
      {"shuffle_state", checkpoint.shuffle_state},
      {"setup", checkpoint.setup},
  };
  if (const std::optional<LanguageModelProgress>& progress = checkpoint.language_model) {
    Json evaluations = Json::array();
    for (const LanguageModelEvaluation& e : progress->evaluations) {
      evaluations.push_back({{"step", e.step}, {"train_loss", e.train_loss}, {"val_loss", e.val_loss}});
    }
    state["language_model"] = {
        {"train_draws", progress->train_draws}, {"eval_draws", progress->eval_draws}, {"evaluations", evaluations}};
  } else {
    const Standardizer& s = checkpoint.standardizer;
    state["standardizer"] = {{"feature_mean", s.feature_mean},
                             {"feature_scale", s.feature_scale},
                             {"target_mean", s.target_mean},
                             {"target_scale", s.target_scale}};
  }
  const HeaderSeal seal{kChecksumDigits,
                        [&](std::string_view placeholder) {
                          std::map<std::string, std::string> sealed = metadata;
                          Json with_checksum = state;
                          with_checksum["checksum"] = std::string(placeholder);
                          sealed[kMetadataKey] = with_checksum.dump();
                          return sealed;
                        },
                        [&] { return combined_checksum(hashes, metadata.at(kOptimizerMetadataKey)); }};
  save_tensors_streamed(tensors, path, seal);
}

Checkpoint load_checkpoint(const std::string& path) {
  TensorFile file = load_tensors(path);
  auto entry = file.metadata.find(kMetadataKey);
  TANDEM_CHECK(entry != file.metadata.end(), "load_checkpoint: '", path,
               "' is a tensor file but not a trainer checkpoint (no \"", kMetadataKey, "\" metadata)");
  Checkpoint checkpoint;
  read_metadata(entry->second, path, checkpoint);
  if (checkpoint.version >= kFirstVersionWithChecksum)
    checkpoint.checksum = checkpoint_checksum(file, checkpoint.version);
  const bool with_optimizer_state = checkpoint.version >= 4;
  if (with_optimizer_state) checkpoint.optimizer = optim::read_optimizer_state(file, "load_checkpoint: '" + path + "'");
  for (auto& [name, tensor] : file.tensors) {
    if (name.starts_with(kModelPrefix)) {
      checkpoint.model_state.emplace_back(name.substr(kModelPrefix.size()), std::move(tensor));
    } else if (!with_optimizer_state && name.starts_with(kMomentumPrefix)) {
      checkpoint.momentum_buffers.emplace_back(name.substr(kMomentumPrefix.size()), std::move(tensor));
    } else {
      TANDEM_FAIL("load_checkpoint: '", path, "' has an unexpected tensor \"", excerpt(name), "\" for a version ",
                  checkpoint.version, " checkpoint");
    }
  }
  return checkpoint;
}

}  // namespace tandem::trainers
