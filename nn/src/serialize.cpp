#include "tandem/nn/serialize.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "safetensors_header.h"
#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"

namespace tandem {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

using safetensors::kHeaderLengthBytes;
using safetensors::kMetadataKey;

// ---- writing --------------------------------------------------------------------------------------------------

template <class T>
void write_values_as(AtomicFile& file, const Tensor& tensor) {
  const std::vector<T> values = tensor.to_vector_as<T>();
  file.write(values.data(), values.size() * sizeof(T));
}

// The tensor's elements in row-major order, as they are in memory on a little-endian host.
void write_values(AtomicFile& file, const Tensor& tensor) {
  switch (tensor.dtype()) {
    case DType::Float32: return write_values_as<float>(file, tensor);
    case DType::Int64: return write_values_as<int64_t>(file, tensor);
    case DType::BFloat16: return write_values_as<BFloat16>(file, tensor);
  }
}

void write_safetensors(const std::vector<std::pair<std::string, Tensor>>& tensors, const std::string& path,
                       const std::map<std::string, std::string>& metadata, const char* caller) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  size_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const auto& [name, tensor] = tensors[i];
    TANDEM_CHECK(!name.empty(), caller, ": tensor ", i, " has an empty name");
    TANDEM_CHECK(name != kMetadataKey, caller, ": tensor ", i, " is named '", kMetadataKey,
                 "', which the format reserves for metadata");
    TANDEM_CHECK(tensor.defined(), caller, ": tensor '", name, "' is undefined");
    TANDEM_CHECK(!header.contains(name), caller, ": two tensors are named '", name, "'");
    size_t bytes = static_cast<size_t>(tensor.numel()) * element_size(tensor.dtype());
    header[name] = {{"dtype", std::string(safetensors::format_dtype(tensor.dtype()))},
                    {"shape", tensor.shape()},
                    {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  if (!metadata.empty()) header[kMetadataKey] = metadata;

  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception&) {
    TANDEM_FAIL(caller, ": a tensor name or a metadata entry is not valid UTF-8 (cannot write '", path, "')");
  }
  text.append((kHeaderLengthBytes - text.size() % kHeaderLengthBytes) % kHeaderLengthBytes, ' ');
  uint64_t header_length = text.size();

  AtomicFile file(path, caller);
  file.write(&header_length, sizeof(header_length));
  file.write(text.data(), text.size());
  for (const auto& [name, tensor] : tensors) write_values(file, tensor);
  file.commit();
}

}  // namespace

void save_tensors(const std::vector<std::pair<std::string, Tensor>>& tensors, const std::string& path,
                  const std::map<std::string, std::string>& metadata) {
  write_safetensors(tensors, path, metadata, "save_tensors");
}

void save(const nn::Module& module, const std::string& path) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [names, tensor] : module.state_tensors()) tensors.emplace_back(names.front(), tensor);
  write_safetensors(tensors, path, {{"format", "pt"}}, "save");
}

}  // namespace tandem
