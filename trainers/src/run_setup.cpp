#include "tandem/trainers/run_setup.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <numeric>
#include <optional>
#include <set>

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

std::string fingerprint(const TableDataset& data) {
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

std::string fingerprint(const Dataset& data) {
  constexpr int64_t kBatch = 4096;  // examples read at once
  Fnv1a hash;
  for (int64_t first = 0; first < data.size(); first += kBatch) {
    std::vector<int64_t> indices(static_cast<size_t>(std::min(kBatch, data.size() - first)));
    std::iota(indices.begin(), indices.end(), first);
    const Example batch = data.get_batch(indices);
    add_tensor(hash, batch.data);
    add_tensor(hash, batch.target);
  }
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(hash.value()));
  return std::to_string(data.size()) + " examples, fnv1a64 " + hex;
}

void add_tensor(Fnv1a& hash, const Tensor& tensor) {
  add_name(hash, tensor.defined() ? dtype_name(tensor.dtype()) : "undefined");
  if (!tensor.defined()) return;
  for (const int64_t extent : tensor.shape()) hash.add(&extent, sizeof(extent));
  const Tensor host = tensor.to(Device::cpu()).contiguous();
  hash.add(host.data_ptr(), static_cast<size_t>(host.numel()) * element_size(host.dtype()));
}

std::string fingerprint(const std::vector<Tensor>& tensors) {
  Fnv1a hash;
  for (const Tensor& tensor : tensors) add_tensor(hash, tensor);
  char hex[17];
  std::snprintf(hex, sizeof(hex), "%016llx", static_cast<unsigned long long>(hash.value()));
  return std::string("fnv1a64 ") + hex;
}

namespace {

// Facts as text, each "<name length>:<name><value length>:<value>", and back.
std::string serialize(const SetupFacts& facts) {
  std::string text;
  for (const auto& [name, value] : facts) {
    text += std::to_string(name.size()) + ":" + name + std::to_string(value.size()) + ":" + value;
  }
  return text;
}

std::optional<std::string> read_field(const std::string& text, size_t& at) {
  const size_t colon = text.find(':', at);
  if (colon == std::string::npos || colon == at || colon - at > 9) return std::nullopt;
  const std::string digits = text.substr(at, colon - at);
  if (digits.find_first_not_of("0123456789") != std::string::npos) return std::nullopt;
  const size_t length = std::stoul(digits);
  if (length > text.size() - colon - 1) return std::nullopt;
  at = colon + 1 + length;
  return text.substr(colon + 1, length);
}

std::optional<SetupFacts> deserialize(const std::string& text) {
  SetupFacts facts;
  for (size_t at = 0; at < text.size();) {
    const std::optional<std::string> name = read_field(text, at);
    const std::optional<std::string> value = name ? read_field(text, at) : std::nullopt;
    if (!value) return std::nullopt;
    facts[*name] = *value;
  }
  return facts;
}

}  // namespace

void check_same_setup(comm::ProcessGroup& group, const SetupFacts& facts, const SetupFacts& derived,
                      const char* caller) {
  if (group.size() == 1) return;
  // One map, each name behind its rank: "0" for `facts`, "1" for `derived`, so that the first difference found is
  // one of `facts` whenever they differ.
  SetupFacts ranked;
  for (const auto& [name, value] : facts) ranked["0" + name] = value;
  for (const auto& [name, value] : derived) ranked["1" + name] = value;
  const std::vector<std::string> texts = group.exchange_text(serialize(ranked), "the comparison of the setups");
  const std::optional<SetupFacts> first = deserialize(texts[0]);
  TANDEM_CHECK(first.has_value(), caller, ": rank 0 sent a setup that cannot be read");
  for (size_t p = 1; p < texts.size(); ++p) {
    if (texts[p] == texts[0]) continue;
    const std::optional<SetupFacts> other = deserialize(texts[p]);
    TANDEM_CHECK(other.has_value(), caller, ": rank ", p, " sent a setup that cannot be read");
    std::set<std::string> names;
    for (const auto& [name, value] : *first) names.insert(name);
    for (const auto& [name, value] : *other) names.insert(name);
    std::string what;
    size_t differing = 0;
    for (const std::string& name : names) {
      const auto a = first->find(name);
      const auto b = other->find(name);
      const std::string on0 = a == first->end() ? "(none)" : a->second;
      const std::string onp = b == other->end() ? "(none)" : b->second;
      if (on0 == onp) continue;
      if (differing++ == 0) {
        what = name.substr(1) + " is " + excerpt(on0, 200) + " on rank 0 but " + excerpt(onp, 200) + " on rank " +
               std::to_string(p);
      }
    }
    throw SetupMismatch(std::string(caller) + ": the processes' setups differ: " + what + " (" +
                        std::to_string(differing) + (differing == 1 ? " fact differs" : " facts differ") +
                        "); every process must run the same setup");
  }
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
      differences.push_back(name + ": " + excerpt(before, 200) + " in the checkpoint, " + excerpt(after, 200) + " now");
    }
  }
  return differences;
}

}  // namespace tandem::trainers
