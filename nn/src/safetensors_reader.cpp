// Reading safetensors files: load_tensors, load_tensors_from_bytes and load(module). The header is parsed and
// checked by safetensors_header; this file reads the bytes, from a file or from memory, through one ByteSource.
#include <bit>
#include <cstring>
#include <map>
#include <new>

#include "io/byte_source.h"
#include "safetensors_header.h"
#include "tandem/core/error.h"
#include "tandem/core/grad_mode.h"
#include "tandem/nn/serialize.h"

namespace tandem {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

using safetensors::kHeaderLengthBytes;

// The prefix of every message about one file, e.g. "load_tensors: 'model.safetensors': ".
std::string where_of(std::string_view caller, std::string_view source) {
  return detail::concat(caller, ": '", source, "': ");
}

Tensor allocate(const safetensors::TensorEntry& entry, const std::string& where) {
  try {
    return Tensor::empty(entry.shape, entry.dtype);
  } catch (const Error& error) {
    TANDEM_FAIL(where, "tensor '", excerpt(entry.name), "': ", error.what());
  }
}

// Note [One copy of the data]: the header is validated in full (see parse_header) before any tensor is allocated,
// and its text is freed before the first one is. Each tensor's bytes then go straight from the source into the
// tensor's storage, so a file costs its header once and its tensors once.
TensorFile read_tensors(ByteSource& source, const std::string& where) {
  const uint64_t size = source.size();
  TANDEM_CHECK(size >= kHeaderLengthBytes, where, "the file is truncated: it has ", size,
               " bytes, but a safetensors file starts with an 8-byte header length");
  uint64_t header_length = 0;
  source.read(0, &header_length, sizeof(header_length));
  TANDEM_CHECK(header_length <= safetensors::kMaxHeaderBytes, where, "the header length ", header_length,
               " is over the limit of ", safetensors::kMaxHeaderBytes, " bytes");
  const uint64_t available = size - kHeaderLengthBytes;
  TANDEM_CHECK(header_length <= available, where, "the header length ", header_length,
               " runs past the end of the file (", available,
               " bytes follow the length): truncated or not a safetensors file");
  const uint64_t data_begin = kHeaderLengthBytes + header_length;

  safetensors::Header header;
  {
    std::string json(header_length, '\0');
    source.read(kHeaderLengthBytes, json.data(), json.size());
    header = safetensors::parse_header(json, size - data_begin, where);
  }
  TensorFile file;
  file.metadata = std::move(header.metadata);
  file.tensors.reserve(header.tensors.size());
  for (safetensors::TensorEntry& entry : header.tensors) {
    Tensor tensor = allocate(entry, where);
    source.read(data_begin + entry.begin, tensor.mutable_data_ptr(), entry.end - entry.begin);
    file.tensors.emplace_back(std::move(entry.name), std::move(tensor));
  }
  return file;
}

// Host memory for the header and the bookkeeping of the tensors can run out too.
TensorFile read_tensors_or_fail(ByteSource& source, const std::string& where) {
  try {
    return read_tensors(source, where);
  } catch (const std::bad_alloc&) {
    TANDEM_FAIL(where, "out of host memory");
  }
}

TensorFile read_file(const std::string& path, const char* caller) {
  const std::string where = where_of(caller, path);
  FileByteSource source(path, where);
  return read_tensors_or_fail(source, where);
}

// Whether two tensors read from a file (contiguous, on the CPU, of one shape and dtype) hold the same bytes.
bool same_bytes(const Tensor& a, const Tensor& b) {
  const size_t bytes = static_cast<size_t>(a.numel()) * element_size(a.dtype());
  return bytes == 0 || std::memcmp(a.data_ptr(), b.data_ptr(), bytes) == 0;
}

}  // namespace

TensorFile load_tensors(const std::string& path) { return read_file(path, "load_tensors"); }

TensorFile load_tensors_from_bytes(std::string_view bytes, std::string_view source_name) {
  const std::string where = where_of("load_tensors_from_bytes", source_name);
  MemoryByteSource source(bytes, where);
  return read_tensors_or_fail(source, where);
}

namespace {

// The file's tensor for `target`, one tensor of `module` with these names (Note [Shared parameters] in module.h):
// under any of them, and where several are in the file they must hold the same bytes. The entries found are taken
// out of `in_file`.
const Tensor* source_of(const std::vector<std::string>& names, const Tensor& target,
                        std::map<std::string, const Tensor*>& in_file, const nn::Module& module,
                        const std::string& path) {
  const Tensor* source = nullptr;
  const std::string* source_name = nullptr;
  for (const std::string& name : names) {
    const auto found = in_file.find(name);
    if (found == in_file.end()) continue;
    const Tensor& stored = *found->second;
    TANDEM_CHECK(stored.shape() == target.shape(), "load: '", name, "' has shape ", to_string(stored.shape()),
                 " in the file but ", to_string(target.shape()), " in the module (reading '", path, "')");
    TANDEM_CHECK(stored.dtype() == target.dtype(), "load: '", name, "' is ", stored.dtype(), " in the file but ",
                 target.dtype(), " in the module (reading '", path, "')");
    TANDEM_CHECK(source == nullptr || same_bytes(*source, stored), "load: '", *source_name, "' and '", name,
                 "' are one tensor of ", module.name(), " but hold different values in the file (reading '", path,
                 "')");
    if (source == nullptr) {
      source = &stored;
      source_name = &name;
    }
    in_file.erase(found);
  }
  if (source != nullptr) return source;
  std::string listed = "'" + names.front() + "'";
  for (size_t i = 1; i < names.size(); ++i) listed += ", '" + names[i] + "'";
  const bool shared = names.size() > 1;
  TANDEM_FAIL("load: checkpoint has no tensor ", shared ? "under any of the names " : "", listed,
              shared ? " of one shared tensor" : "", " (reading '", path, "' into ", module.name(), ")");
}

}  // namespace

void load(nn::Module& module, const std::string& path) {
  TensorFile file = read_file(path, "load");
  std::map<std::string, const Tensor*> in_file;
  for (const auto& [name, tensor] : file.tensors) in_file[name] = &tensor;

  std::vector<nn::Module::StateTensor> state = module.state_tensors();
  std::vector<const Tensor*> sources;
  for (const auto& [names, tensor] : state) sources.push_back(source_of(names, tensor, in_file, module, path));
  TANDEM_CHECK(in_file.empty(), "load: checkpoint has a tensor '",
               in_file.empty() ? "" : excerpt(in_file.begin()->first), "' that ", module.name(),
               " does not have (reading '", path, "')");

  NoGradGuard no_grad;
  for (size_t i = 0; i < state.size(); ++i) state[i].tensor.copy_(*sources[i]);
}

}  // namespace tandem
