#include "tandem/trainers/run_setup.h"

#include <cstdio>
#include <cstdlib>

#include "tandem/core/error.h"
#include "tandem/core/fnv1a.h"

namespace tandem::trainers {
namespace {

// A name and a NUL after it, so that ("ab", "c") and ("a", "bc") differ.
void add_name(Fnv1a& hash, const std::string& name) {
  hash.add(name);
  hash.add("", 1);
}

std::string one_line(const std::string& text) {
  std::string line;
  for (char c : text) line += c == '\n' ? ' ' : c;
  return line;
}

}  // namespace

std::string describe_module(const nn::Module& module) {
  std::string text = module.name() + "(" + module.extra_repr();
  bool first = module.extra_repr().empty();
  for (const auto& [name, child] : module.named_children()) {
    text += (first ? "" : ", ") + name + ": " + describe_module(*child);
    first = false;
  }
  return one_line(text + ")");
}

std::string fingerprint(const Dataset& data) {
  Fnv1a hash;
  for (const std::string& name : data.feature_names) add_name(hash, name);
  add_name(hash, data.target_name);
  hash.add(data.features.data(), data.features.size() * sizeof(double));
  hash.add(data.targets.data(), data.targets.size() * sizeof(double));
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(hash.value()));
  return std::to_string(data.rows()) + " rows x " + std::to_string(data.num_features()) + " features, target " +
         data.target_name + ", fnv1a64 " + hex;
}

std::string exact_text(double value) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.17g", value);
  // The shortest of %.15g..%.17g that reads back exactly keeps "0.01" readable.
  for (int digits = 15; digits < 17; ++digits) {
    char shorter[32];
    std::snprintf(shorter, sizeof(shorter), "%.*g", digits, value);
    if (std::strtod(shorter, nullptr) == value) return shorter;
  }
  return text;
}

std::vector<std::string> setup_differences(const SetupFacts& recorded, const SetupFacts& current,
                                           const std::set<std::string>& ignored) {
  std::set<std::string> names;
  for (const auto& [name, value] : recorded) names.insert(name);
  for (const auto& [name, value] : current) names.insert(name);
  std::vector<std::string> differences;
  for (const std::string& name : names) {
    if (ignored.contains(name)) continue;
    const auto then = recorded.find(name);
    const auto now = current.find(name);
    const std::string before = then == recorded.end() ? "(none)" : then->second;
    const std::string after = now == current.end() ? "(none)" : now->second;
    if (before != after) {
      differences.push_back(name + ": " + excerpt(before, 200) + " in the checkpoint, " + excerpt(after, 200) +
                            " now");
    }
  }
  return differences;
}

}  // namespace tandem::trainers
