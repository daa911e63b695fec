#pragma once
// Random-access reads from a file or a memory buffer, so that one reader validates both the same way.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>

namespace tandem {

// The bytes to read; their size is fixed when the source is made. Errors are tandem::Error prefixed with the
// `where` text given to the constructor (e.g. "load_tensors: 'model.safetensors': ").
class ByteSource {
 public:
  virtual ~ByteSource() = default;
  uint64_t size() const { return size_; }
  // Copies bytes [offset, offset + length) to `out`. Requires the range to lie within size(): the readers check
  // every range against size() first, so one outside it is an InternalError. Throws Error when the bytes cannot be
  // read.
  void read(uint64_t offset, void* out, size_t length);

 protected:
  ByteSource(uint64_t size, std::string where) : size_(size), where_(std::move(where)) {}
  const std::string& where() const { return where_; }

 private:
  virtual void read_within(uint64_t offset, void* out, size_t length) = 0;
  uint64_t size_;
  std::string where_;
};

// A regular file, opened read-only. Anything else (a directory, a FIFO, a device such as /dev/zero) is refused
// without blocking, and the size is the one fstat reports at open. Throws Error when the file cannot be opened or is
// not a regular file, and from read() when it cannot be read or has shrunk since it was opened.
class FileByteSource final : public ByteSource {
 public:
  FileByteSource(const std::string& path, std::string where);
  FileByteSource(const FileByteSource&) = delete;
  FileByteSource& operator=(const FileByteSource&) = delete;
  ~FileByteSource() override;

 private:
  struct Opened {
    int fd;
    uint64_t size;
  };
  static Opened open_regular_file(const std::string& path, const std::string& where);
  FileByteSource(Opened opened, std::string&& where);
  void read_within(uint64_t offset, void* out, size_t length) override;
  int fd_;
};

// A buffer the caller keeps alive while the source is used.
class MemoryByteSource final : public ByteSource {
 public:
  MemoryByteSource(std::string_view bytes, std::string where)
      : ByteSource(bytes.size(), std::move(where)), bytes_(bytes) {}

 private:
  void read_within(uint64_t offset, void* out, size_t length) override;
  std::string_view bytes_;
};

}  // namespace tandem
