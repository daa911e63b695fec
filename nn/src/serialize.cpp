#include "tandem/nn/serialize.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <bit>
#include <cerrno>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "tandem/core/error.h"

namespace tandem {
namespace {

static_assert(std::endian::native == std::endian::little, "safetensors data is little-endian");

constexpr const char* kMetadataKey = "__metadata__";
constexpr size_t kHeaderLengthBytes = 8;

std::string errno_text() { return std::strerror(errno); }

// ---- writing --------------------------------------------------------------------------------------------------

// A file descriptor open on "<path>.tmp.<pid>"; the file is removed unless commit() renamed it over `path`.
class TempFile {
 public:
  TempFile(std::string path, const char* caller)
      : path_(std::move(path)), temp_path_(path_ + ".tmp." + std::to_string(::getpid())), caller_(caller) {
    fd_ = ::open(temp_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    TANDEM_CHECK(fd_ >= 0, caller_, ": cannot write '", path_, "': cannot create '", temp_path_, "': ",
                 errno_text());
  }
  TempFile(const TempFile&) = delete;
  TempFile& operator=(const TempFile&) = delete;
  ~TempFile() {
    if (fd_ >= 0) ::close(fd_);
    if (!committed_) ::unlink(temp_path_.c_str());
  }

  void write(const void* data, size_t size) {
    const char* bytes = static_cast<const char*>(data);
    while (size > 0) {
      ssize_t written = ::write(fd_, bytes, size);
      if (written < 0 && errno == EINTR) continue;
      TANDEM_CHECK(written > 0, caller_, ": cannot write '", path_, "': writing '", temp_path_, "' failed: ",
                   errno_text());
      bytes += written;
      size -= static_cast<size_t>(written);
    }
  }

  // Flushes the data to disk, then renames the file over `path` and flushes the directory entry.
  void commit() {
    TANDEM_CHECK(::fsync(fd_) == 0, caller_, ": cannot write '", path_, "': fsync failed: ", errno_text());
    int fd = fd_;
    fd_ = -1;
    TANDEM_CHECK(::close(fd) == 0, caller_, ": cannot write '", path_, "': close failed: ", errno_text());
    TANDEM_CHECK(::rename(temp_path_.c_str(), path_.c_str()) == 0, caller_, ": cannot write '", path_,
                 "': renaming '", temp_path_, "' over it failed: ", errno_text());
    committed_ = true;
    sync_directory();
  }

 private:
  // Best effort: the rename is already visible; this only makes it durable across a power loss.
  void sync_directory() const {
    std::filesystem::path directory = std::filesystem::path(path_).parent_path();
    int fd = ::open(directory.empty() ? "." : directory.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    ::fsync(fd);
    ::close(fd);
  }

  std::string path_;
  std::string temp_path_;
  const char* caller_;
  int fd_ = -1;
  bool committed_ = false;
};

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

  TempFile file(path, caller);
  file.write(&header_length, sizeof(header_length));
  file.write(text.data(), text.size());
  for (const auto& [name, tensor] : tensors) {
    std::vector<float> values = tensor.to_vector();
    file.write(values.data(), values.size() * sizeof(float));
  }
  file.commit();
}

}  // namespace

void save_tensors(const std::vector<std::pair<std::string, Tensor>>& tensors, const std::string& path,
                  const std::map<std::string, std::string>& metadata) {
  write_safetensors(tensors, path, metadata, "save_tensors");
}

void save(const nn::Module& module, const std::string& path) {
  write_safetensors(module.named_parameters(), path, {{"format", "pt"}}, "save");
}

}  // namespace tandem
