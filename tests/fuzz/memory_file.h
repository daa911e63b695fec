#pragma once
// A file that lives in memory (memfd_create), so a fuzz target can hand each input to a path-taking loader without
// touching the disk.

#include <cstddef>
#include <cstdint>
#include <string>

namespace tandem::fuzz {

class MemoryFile {
 public:
  // Aborts when the kernel cannot create one: a fuzz target cannot run without it.
  explicit MemoryFile(const char* name);
  MemoryFile(const MemoryFile&) = delete;
  MemoryFile& operator=(const MemoryFile&) = delete;
  ~MemoryFile();

  // The file's contents become exactly these bytes (truncated or extended to `size`).
  void assign(const uint8_t* data, size_t size);
  // "/proc/self/fd/<n>": every open() of it starts at offset 0.
  const std::string& path() const { return path_; }

 private:
  int fd_;
  std::string path_;
};

}  // namespace tandem::fuzz
