#include "tandem/trainers/checkpoint.h"

#include <nlohmann/json.hpp>

#include "tandem/core/error.h"
#include "tandem/nn/serialize.h"

namespace tandem::trainers {
namespace {

constexpr const char* kMetadataKey = "tandem.trainer";
constexpr const char* kFormat = "tandem-trainer-checkpoint";
constexpr int kVersion = 1;
constexpr std::string_view kParameterPrefix = "model.";
constexpr std::string_view kMomentumPrefix = "momentum.";

}  // namespace

void save_checkpoint(const Checkpoint& checkpoint, const std::string& path) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [name, tensor] : checkpoint.parameters) {
    tensors.emplace_back(std::string(kParameterPrefix) + name, tensor);
  }
  for (const auto& [name, tensor] : checkpoint.momentum_buffers) {
    tensors.emplace_back(std::string(kMomentumPrefix) + name, tensor);
  }
  const Standardizer& s = checkpoint.standardizer;
  nlohmann::json state = {
      {"format", kFormat},
      {"version", kVersion},
      {"epoch", checkpoint.epoch},
      {"step", checkpoint.step},
      {"generator", {{"seed", checkpoint.generator.seed}, {"counter", checkpoint.generator.counter}}},
      {"shuffle_state", checkpoint.shuffle_state},
      {"standardizer",
       {{"feature_mean", s.feature_mean},
        {"feature_scale", s.feature_scale},
        {"target_mean", s.target_mean},
        {"target_scale", s.target_scale}}},
  };
  save_tensors(tensors, path, {{kMetadataKey, state.dump()}});
}

Checkpoint load_checkpoint(const std::string& path) {
  TensorFile file = load_tensors(path);
  auto entry = file.metadata.find(kMetadataKey);
  TANDEM_CHECK(entry != file.metadata.end(), "load_checkpoint: \"", path,
               "\" is a tensor file but not a trainer checkpoint (no \"", kMetadataKey, "\" metadata)");
  Checkpoint checkpoint;
  try {
    nlohmann::json state = nlohmann::json::parse(entry->second);
    TANDEM_CHECK(state.at("format") == kFormat && state.at("version") == kVersion, "load_checkpoint: \"", path,
                 "\" has format ", state.at("format"), " version ", state.at("version"), " but expected ", kFormat,
                 " version ", kVersion);
    checkpoint.epoch = state.at("epoch").get<int64_t>();
    checkpoint.step = state.at("step").get<int64_t>();
    checkpoint.generator.seed = state.at("generator").at("seed").get<uint64_t>();
    checkpoint.generator.counter = state.at("generator").at("counter").get<uint64_t>();
    checkpoint.shuffle_state = state.at("shuffle_state").get<uint64_t>();
    const nlohmann::json& s = state.at("standardizer");
    checkpoint.standardizer.feature_mean = s.at("feature_mean").get<std::vector<double>>();
    checkpoint.standardizer.feature_scale = s.at("feature_scale").get<std::vector<double>>();
    checkpoint.standardizer.target_mean = s.at("target_mean").get<double>();
    checkpoint.standardizer.target_scale = s.at("target_scale").get<double>();
  } catch (const nlohmann::json::exception& e) {
    TANDEM_FAIL("load_checkpoint: \"", path, "\" has malformed trainer metadata: ", e.what());
  }
  for (auto& [name, tensor] : file.tensors) {
    if (name.starts_with(kParameterPrefix)) {
      checkpoint.parameters.emplace_back(name.substr(kParameterPrefix.size()), std::move(tensor));
    } else if (name.starts_with(kMomentumPrefix)) {
      checkpoint.momentum_buffers.emplace_back(name.substr(kMomentumPrefix.size()), std::move(tensor));
    } else {
      TANDEM_FAIL("load_checkpoint: \"", path, "\" has an unexpected tensor \"", name, "\"");
    }
  }
  return checkpoint;
}

}  // namespace tandem::trainers
