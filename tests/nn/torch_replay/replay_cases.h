#pragma once
// The cases of a safetensors replay file that a script of tests/nn/torch_replay wrote (make_attention_replay.py,
// make_conv_replay.py, make_batch_norm2d_replay.py): tensors named NAME.PART, and per case the metadata entry NAME,
// its settings as JSON.

#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "tandem/nn/serialize.h"

namespace tandem::testing {

struct ReplayCase {
  std::string name;
  std::map<std::string, Tensor> parts;  // by PART
  nlohmann::json settings;
};

// The file's cases in the order of their names. Errors: those of load_tensors; a case without its metadata entry.
inline std::vector<ReplayCase> load_replay_cases(const std::string& path) {
  const TensorFile file = load_tensors(path);
  std::map<std::string, ReplayCase> by_name;
  for (const auto& [key, tensor] : file.tensors) {
    const size_t dot = key.find('.');
    ReplayCase& c = by_name[key.substr(0, dot)];
    c.name = key.substr(0, dot);
    c.parts.emplace(key.substr(dot + 1), tensor);
  }
  std::vector<ReplayCase> cases;
  for (auto& [name, c] : by_name) {
    c.settings = nlohmann::json::parse(file.metadata.at(name));
    cases.push_back(std::move(c));
  }
  return cases;
}

}  // namespace tandem::testing
