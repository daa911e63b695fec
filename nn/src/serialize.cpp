#include "tandem/nn/serialize.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <map>
#include <nlohmann/json.hpp>

#include "tandem/core/atomic_file.h"
#include "tandem/core/error.h"
#include "tandem/core/grad_mode.h"
#include "tandem/core/shape.h"

namespace tandem {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

constexpr const char* kMetadataKey = "__metadata__";
constexpr size_t kHeaderLengthBytes = 8;

std::string errno_text() { return std::strerror(errno); }

// ---- writing --------------------------------------------------------------------------------------------------

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
    size_t bytes = static_cast<size_t>(tensor.numel()) * sizeof(float);
    header[name] = {{"dtype", "F32"}, {"shape", tensor.shape()}, {"data_offsets", {offset, offset + bytes}}};
    offset += bytes;
  }
  if (!metadata.empty()) header[kMetadataKey] = metadata;

  std::string text = header.dump();
  text.append((kHeaderLengthBytes - text.size() % kHeaderLengthBytes) % kHeaderLengthBytes, ' ');
  uint64_t header_length = text.size();

  AtomicFile file(path, caller);
  file.write(&header_length, sizeof(header_length));
  file.write(text.data(), text.size());
  for (const auto& [name, tensor] : tensors) {
    std::vector<float> values = tensor.to_vector();
    file.write(values.data(), values.size() * sizeof(float));
  }
  file.commit();
}

// ---- reading --------------------------------------------------------------------------------------------------

std::string read_file(const std::string& path, const char* caller) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TANDEM_CHECK(fd >= 0, caller, ": cannot open '", path, "': ", errno_text());
  std::string bytes;
  char chunk[1 << 16];
  while (true) {
    ssize_t got = ::read(fd, chunk, sizeof(chunk));
    if (got < 0 && errno == EINTR) continue;
    if (got <= 0) {
      int error = errno;
      ::close(fd);
      TANDEM_CHECK(got == 0, caller, ": cannot read '", path, "': ", std::strerror(error));
      return bytes;
    }
    bytes.append(chunk, static_cast<size_t>(got));
  }
}

struct Entry {
  std::string name;
  Shape shape;
  uint64_t begin;
  uint64_t end;
};

// Parses and validates one header entry; `data_size` is the size of the data section in bytes.
Entry parse_entry(const std::string& name, const nlohmann::json& value, uint64_t data_size,
                  const std::string& where) {
  TANDEM_CHECK(value.is_object(), where, "tensor '", name, "' is not described by a JSON object");
  TANDEM_CHECK(value.contains("dtype") && value["dtype"].is_string(), where, "tensor '", name, "' has no dtype");
  std::string dtype = value["dtype"].get<std::string>();
  TANDEM_CHECK(dtype == "F32", where, "tensor '", name, "' has dtype ", dtype, " but only F32 is supported");

  TANDEM_CHECK(value.contains("shape") && value["shape"].is_array(), where, "tensor '", name, "' has no shape");
  Entry entry{name, {}, 0, 0};
  uint64_t elements = 1;
  bool overflow = false;
  for (const auto& size : value["shape"]) {
    TANDEM_CHECK(size.is_number_unsigned(), where, "tensor '", name, "' has shape ", value["shape"].dump(),
                 " but sizes must be non-negative integers");
    uint64_t s = size.get<uint64_t>();
    overflow = overflow || __builtin_mul_overflow(elements, s, &elements) || s > INT64_MAX;
    entry.shape.push_back(static_cast<int64_t>(s));
  }

  const auto& offsets = value.contains("data_offsets") ? value["data_offsets"] : nlohmann::json();
  TANDEM_CHECK(offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_unsigned() &&
                   offsets[1].is_number_unsigned(),
               where, "tensor '", name, "' has no valid data_offsets (expected [begin, end])");
  entry.begin = offsets[0].get<uint64_t>();
  entry.end = offsets[1].get<uint64_t>();
  TANDEM_CHECK(entry.begin <= entry.end && entry.end <= data_size, where, "tensor '", name, "' has data_offsets [",
               entry.begin, ", ", entry.end, "] outside the data section of ", data_size, " bytes");
  uint64_t needed = 0;
  overflow = overflow || __builtin_mul_overflow(elements, uint64_t{sizeof(float)}, &needed);
  TANDEM_CHECK(!overflow && entry.end - entry.begin == needed, where, "tensor '", name, "' has data_offsets [",
               entry.begin, ", ", entry.end, "] (", entry.end - entry.begin, " bytes) but its shape ",
               to_string(entry.shape), " needs ", overflow ? std::string("more") : std::to_string(needed),
               " bytes");
  return entry;
}

TensorFile read_safetensors(const std::string& path, const char* caller) {
  std::string bytes = read_file(path, caller);
  const std::string where = std::string(caller) + ": '" + path + "': ";
  TANDEM_CHECK(bytes.size() >= kHeaderLengthBytes, where, "the file is truncated: it has ", bytes.size(),
               " bytes, but a safetensors file starts with an 8-byte header length");
  uint64_t header_length = 0;
  std::memcpy(&header_length, bytes.data(), sizeof(header_length));
  uint64_t available = bytes.size() - kHeaderLengthBytes;
  TANDEM_CHECK(header_length <= available, where, "the header length ", header_length,
               " runs past the end of the file (", available, " bytes follow the length): truncated or not a ",
               "safetensors file");

  nlohmann::json header;
  try {
    header = nlohmann::json::parse(bytes.begin() + kHeaderLengthBytes,
                                   bytes.begin() + static_cast<std::ptrdiff_t>(kHeaderLengthBytes + header_length));
  } catch (const nlohmann::json::exception& e) {
    TANDEM_FAIL(where, "the header is not valid JSON: ", e.what());
  }
  TANDEM_CHECK(header.is_object(), where, "the header is not a JSON object");

  const uint64_t data_begin = kHeaderLengthBytes + header_length;
  const uint64_t data_size = bytes.size() - data_begin;
  TensorFile file;
  std::vector<Entry> entries;
  for (const auto& [name, value] : header.items()) {
    if (name == kMetadataKey) {
      TANDEM_CHECK(value.is_object(), where, "__metadata__ is not a JSON object");
      for (const auto& [key, text] : value.items()) {
        TANDEM_CHECK(text.is_string(), where, "__metadata__ entry '", key, "' is not a string");
        file.metadata[key] = text.get<std::string>();
      }
      continue;
    }
    entries.push_back(parse_entry(name, value, data_size, where));
  }

  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (size_t i = 1; i < entries.size(); ++i)
    TANDEM_CHECK(entries[i].begin >= entries[i - 1].end, where, "tensors '", entries[i - 1].name, "' and '",
                 entries[i].name, "' overlap in the data section");

  for (const Entry& entry : entries) {
    std::vector<float> values((entry.end - entry.begin) / sizeof(float));
    if (!values.empty()) std::memcpy(values.data(), bytes.data() + data_begin + entry.begin, entry.end - entry.begin);
    file.tensors.emplace_back(entry.name, Tensor::from_vector(values, entry.shape));
  }
  return file;
}

}  // namespace

void save_tensors(const std::vector<std::pair<std::string, Tensor>>& tensors, const std::string& path,
                  const std::map<std::string, std::string>& metadata) {
  write_safetensors(tensors, path, metadata, "save_tensors");
}

TensorFile load_tensors(const std::string& path) { return read_safetensors(path, "load_tensors"); }

void save(const nn::Module& module, const std::string& path) {
  write_safetensors(module.named_parameters(), path, {{"format", "pt"}}, "save");
}

void load(nn::Module& module, const std::string& path) {
  TensorFile file = read_safetensors(path, "load");
  std::map<std::string, const Tensor*> in_file;
  for (const auto& [name, tensor] : file.tensors) in_file[name] = &tensor;

  std::vector<std::pair<std::string, Tensor>> parameters = module.named_parameters();
  std::vector<const Tensor*> sources;
  for (const auto& [name, parameter] : parameters) {
    auto found = in_file.find(name);
    TANDEM_CHECK(found != in_file.end(), "load: checkpoint has no tensor '", name, "' (reading '", path, "' into ",
                 module.name(), ")");
    TANDEM_CHECK(found->second->shape() == parameter.shape(), "load: '", name, "' has shape ",
                 to_string(found->second->shape()), " in the file but ", to_string(parameter.shape()),
                 " in the module (reading '", path, "')");
    sources.push_back(found->second);
    in_file.erase(found);
  }
  TANDEM_CHECK(in_file.empty(), "load: checkpoint has a tensor '", in_file.empty() ? "" : in_file.begin()->first,
               "' that ", module.name(), " does not have (reading '", path, "')");

  NoGradGuard no_grad;
  for (size_t i = 0; i < parameters.size(); ++i) parameters[i].second.copy_(*sources[i]);
}

}  // namespace tandem
