#include "same_structure.h"

#include <algorithm>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/core/error.h"
#include "tandem/core/fnv1a.h"
#include "tandem/core/shape.h"

namespace tandem::parallel::detail {

namespace {

// Note [Describing a model in floats]: the descriptions travel as float32 tensors (what the group's collectives
// carry), and a float holds every integer below 2^24 exactly. So every integer goes as 16-bit chunks: a name as
// three chunks of a 48-bit hash, a dimension as three chunks (extents below 2^48). A parameter's record is
// [name hash x3, requires_grad, ndim, dim 0 x3, dim 1 x3, ...], padded with zeros to the largest ndim of any process.
constexpr size_t kChunks = 3;
constexpr int64_t kRecordHead = kChunks + 2;

void append_chunks(std::vector<float>& out, uint64_t value) {
  for (size_t c = 0; c < kChunks; ++c) out.push_back(static_cast<float>((value >> (16 * c)) & 0xffffu));
}

uint64_t read_chunks(const float* in) {
  uint64_t value = 0;
  for (size_t c = 0; c < kChunks; ++c) value |= static_cast<uint64_t>(in[c]) << (16 * c);
  return value;
}

uint64_t name_hash(std::string_view name) {
  Fnv1a hash;
  hash.add(name);
  return hash.value();
}

// Gathers `values` (the same length on every process) from every process: result[p] is process p's.
std::vector<std::vector<float>> gather(comm::ProcessGroup& group, const std::vector<float>& values) {
  const auto length = static_cast<int64_t>(values.size());
  std::vector<Tensor> local;
  for (const Device& device : group.devices()) local.push_back(Tensor::from_vector(values, {length}, device));
  const std::vector<float> all = group.all_gather(local).front().to_vector();
  std::vector<std::vector<float>> per_process;
  const size_t stride = values.size() * group.devices().size();  // each process's devices, in order
  for (int p = 0; p < group.size(); ++p) {
    const auto begin = all.begin() + static_cast<std::ptrdiff_t>(stride * static_cast<size_t>(p));
    per_process.emplace_back(begin, begin + length);
  }
  return per_process;
}

Shape shape_of(const float* record) {
  Shape shape;
  const auto ndim = static_cast<size_t>(record[kChunks + 1]);
  for (size_t d = 0; d < ndim; ++d)
    shape.push_back(static_cast<int64_t>(read_chunks(record + kRecordHead + kChunks * d)));
  return shape;
}

// How process `rank`'s record of parameter `index` differs from rank 0's, or "" when it does not.
std::string difference(const float* first, const float* other, int rank, size_t index, const std::string& local_name) {
  const std::string parameter = "parameter " + std::to_string(index) + " ('" + local_name + "' here)";
  const std::string ranks = " on rank 0 but ";
  if (read_chunks(first) != read_chunks(other)) {
    return parameter + " has another name on rank " + std::to_string(rank) + " than on rank 0";
  }
  if (first[kChunks] != other[kChunks]) {
    return parameter + (first[kChunks] != 0 ? " requires grad" : " does not require grad") + ranks +
           (other[kChunks] != 0 ? "requires grad" : "does not") + " on rank " + std::to_string(rank);
  }
  const Shape a = shape_of(first);
  const Shape b = shape_of(other);
  if (a != b)
    return parameter + " has shape " + to_string(a) + ranks + to_string(b) + " on rank " + std::to_string(rank);
  return "";
}

}  // namespace

void check_same_structure(const nn::Module& module, comm::ProcessGroup& group, const char* caller) {
  const auto named = module.named_parameters();
  size_t max_ndim = 0;
  for (const auto& [name, parameter] : named) max_ndim = std::max(max_ndim, parameter.shape().size());
  const std::vector<std::vector<float>> counts =
      gather(group, {static_cast<float>(named.size()), static_cast<float>(max_ndim)});
  for (int p = 1; p < group.size(); ++p) {
    TANDEM_CHECK(counts[static_cast<size_t>(p)][0] == counts[0][0], caller, ": the processes' models differ: rank ", p,
                 " has ", static_cast<int64_t>(counts[static_cast<size_t>(p)][0]), " parameters but rank 0 has ",
                 static_cast<int64_t>(counts[0][0]), "; every process must build the same model");
  }
  if (named.empty()) return;  // the same on every process: nothing more to compare
  for (const std::vector<float>& count : counts) max_ndim = std::max(max_ndim, static_cast<size_t>(count[1]));

  const size_t width = kRecordHead + kChunks * max_ndim;
  std::vector<float> records;
  for (const auto& [name, parameter] : named) {
    append_chunks(records, name_hash(name));
    const Shape& shape = parameter.shape();
    records.push_back(parameter.requires_grad() ? 1.0f : 0.0f);
    records.push_back(static_cast<float>(shape.size()));
    for (const int64_t extent : shape) append_chunks(records, static_cast<uint64_t>(extent));
    records.resize(records.size() + kChunks * (max_ndim - shape.size()), 0.0f);
  }
  const std::vector<std::vector<float>> all = gather(group, records);
  for (size_t i = 0; i < named.size(); ++i) {
    for (int p = 1; p < group.size(); ++p) {
      const std::string why =
          difference(all[0].data() + i * width, all[static_cast<size_t>(p)].data() + i * width, p, i, named[i].first);
      TANDEM_CHECK(why.empty(), caller, ": the processes' models differ: ", why,
                   "; every process must build the same model");
    }
  }
}

}  // namespace tandem::parallel::detail
