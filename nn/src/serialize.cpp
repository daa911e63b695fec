#include "tandem/nn/serialize.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cctype>
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

// The header's JSON, padded to a multiple of kHeaderLengthBytes.
std::string header_text(const std::vector<TensorSource>& tensors, const std::map<std::string, std::string>& metadata,
                        const std::string& path, const char* caller) {
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  size_t offset = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorSource& tensor = tensors[i];
    const std::string& name = tensor.name;
    TANDEM_CHECK(!name.empty(), caller, ": tensor ", i, " has an empty name");
    TANDEM_CHECK(name != kMetadataKey, caller, ": tensor ", i, " is named '", kMetadataKey,
                 "', which the format reserves for metadata");
    TANDEM_CHECK(tensor.values != nullptr, caller, ": tensor '", name, "' is undefined");
    TANDEM_CHECK(!header.contains(name), caller, ": two tensors are named '", name, "'");
    const size_t bytes = checked_nbytes(tensor.shape, element_size(tensor.dtype), caller);
    header[name] = {{"dtype", std::string(safetensors::format_dtype(tensor.dtype))},
                    {"shape", tensor.shape},
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
  return text;
}

// Note [Sealed headers]: a safetensors header precedes the data, but a checksum of the data is known only once the
// data is written. The header is made twice, with the placeholder all '0's and all '1's: the two texts differ in
// exactly the placeholder's characters (digits need no escaping in JSON, however deep the metadata nests them), which
// gives its offset without parsing anything. The header goes out with the first placeholder, the tensors follow, and
// the seal's value is written over the placeholder before the commit, so a reader never sees the placeholder.
struct SealedHeader {
  std::string text;
  size_t seal_offset = 0;  // of the placeholder in `text`
};

SealedHeader sealed_header(const std::vector<TensorSource>& tensors, const HeaderSeal& seal, const std::string& path,
                           const char* caller) {
  TANDEM_CHECK(seal.metadata != nullptr && (seal.length == 0 || seal.value != nullptr), caller,
               ": a seal needs its metadata and, when it has a length, its value");
  SealedHeader header{header_text(tensors, seal.metadata(std::string(seal.length, '0')), path, caller)};
  if (seal.length == 0) return header;
  const std::string ones = header_text(tensors, seal.metadata(std::string(seal.length, '1')), path, caller);
  const auto differs = std::mismatch(header.text.begin(), header.text.end(), ones.begin(), ones.end());
  header.seal_offset = static_cast<size_t>(differs.first - header.text.begin());
  TANDEM_CHECK(
      header.text.size() == ones.size() && header.seal_offset + seal.length <= ones.size() &&
          std::equal(header.text.begin() + static_cast<std::ptrdiff_t>(header.seal_offset + seal.length),
                     header.text.end(), ones.begin() + static_cast<std::ptrdiff_t>(header.seal_offset + seal.length)),
      caller, ": the seal's placeholder must appear exactly once in the metadata");
  return header;
}

// The tensor's elements in row-major order, as they are in memory on a little-endian host.
void write_values(AtomicFile& file, const TensorSource& source, const Tensor& tensor, const char* caller) {
  TANDEM_CHECK(
      tensor.defined() && tensor.dtype() == source.dtype && tensor.shape() == source.shape, caller, ": tensor '",
      source.name, "' was declared ", dtype_name(source.dtype), " ", to_string(source.shape), " but its values are ",
      tensor.defined() ? dtype_name(tensor.dtype()) + std::string(" ") + to_string(tensor.shape()) : "undefined");
  switch (tensor.dtype()) {
    case DType::Float32:
      return write_values_as<float>(file, tensor);
    case DType::Int64:
      return write_values_as<int64_t>(file, tensor);
    case DType::BFloat16:
      return write_values_as<BFloat16>(file, tensor);
  }
}

// Asks every source for its values once, in order, also when writing fails (save_tensors_streamed's promise).
class SourceCursor {
 public:
  explicit SourceCursor(const std::vector<TensorSource>& tensors) : tensors_(tensors) {}
  Tensor next() {
    const TensorSource& source = tensors_[next_++];
    source_failed_ = true;
    Tensor values = source.values();
    source_failed_ = false;
    return values;
  }
  // After a failed write: the sources not asked yet (an undefined one, which the checks refuse, has nothing to ask).
  // An error of a source itself ends the asking.
  void drain() {
    if (source_failed_) return;
    for (; next_ < tensors_.size(); ++next_) {
      if (tensors_[next_].values != nullptr) tensors_[next_].values();
    }
  }

 private:
  const std::vector<TensorSource>& tensors_;
  size_t next_ = 0;
  bool source_failed_ = false;
};

void write_safetensors(const std::vector<TensorSource>& tensors, const std::string& path, const HeaderSeal& seal,
                       const char* caller) {
  SourceCursor cursor(tensors);
  try {
    const SealedHeader header = sealed_header(tensors, seal, path, caller);
    const uint64_t header_length = header.text.size();
    AtomicFile file(path, caller);
    file.write(&header_length, sizeof(header_length));
    file.write(header.text.data(), header.text.size());
    for (const TensorSource& source : tensors) write_values(file, source, cursor.next(), caller);
    if (seal.length > 0) {
      const std::string value = seal.value();
      TANDEM_CHECK(value.size() == seal.length &&
                       std::all_of(value.begin(), value.end(),
                                   [](char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }),
                   caller, ": the seal's value \"", excerpt(value), "\" is not ", seal.length,
                   " letters and digits, the placeholder's length");
      file.overwrite(sizeof(header_length) + header.seal_offset, value.data(), value.size());
    }
    file.commit();
  } catch (...) {
    cursor.drain();
    throw;
  }
}

// The sources of tensors in memory, and metadata without a seal.
std::vector<TensorSource> sources_of(const std::vector<std::pair<std::string, Tensor>>& tensors) {
  std::vector<TensorSource> sources;
  for (const auto& [name, tensor] : tensors) {
    sources.push_back({name, tensor.defined() ? tensor.dtype() : DType::Float32,
                       tensor.defined() ? tensor.shape() : Shape{},
                       tensor.defined() ? std::function<Tensor()>([values = tensor] { return values; }) : nullptr});
  }
  return sources;
}

HeaderSeal unsealed(std::map<std::string, std::string> metadata) {
  return {0, [metadata = std::move(metadata)](std::string_view) { return metadata; }, nullptr};
}

}  // namespace

void save_tensors(const std::vector<std::pair<std::string, Tensor>>& tensors, const std::string& path,
                  const std::map<std::string, std::string>& metadata) {
  write_safetensors(sources_of(tensors), path, unsealed(metadata), "save_tensors");
}

void save_tensors_streamed(const std::vector<TensorSource>& tensors, const std::string& path, const HeaderSeal& seal) {
  write_safetensors(tensors, path, seal, "save_tensors_streamed");
}

void save(const nn::Module& module, const std::string& path) {
  std::vector<std::pair<std::string, Tensor>> tensors;
  for (const auto& [names, tensor] : module.state_tensors()) tensors.emplace_back(names.front(), tensor);
  write_safetensors(sources_of(tensors), path, unsealed({{"format", "pt"}}), "save");
}

}  // namespace tandem
