#include "memory_file.h"

#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>

namespace tandem::fuzz {
namespace {

[[noreturn]] void die(const char* what) {
  std::fprintf(stderr, "MemoryFile: %s failed: %s\n", what, std::strerror(errno));
  std::abort();
}

}  // namespace

MemoryFile::MemoryFile(const char* name) : fd_(::memfd_create(name, MFD_CLOEXEC)) {
  if (fd_ < 0) die("memfd_create");
  path_ = "/proc/self/fd/" + std::to_string(fd_);
}

MemoryFile::~MemoryFile() { ::close(fd_); }

void MemoryFile::assign(const uint8_t* data, size_t size) {
  if (::ftruncate(fd_, static_cast<off_t>(size)) != 0) die("ftruncate");
  size_t done = 0;
  while (done < size) {
    ssize_t written = ::pwrite(fd_, data + done, size - done, static_cast<off_t>(done));
    if (written < 0 && errno == EINTR) continue;
    if (written <= 0) die("pwrite");
    done += static_cast<size_t>(written);
  }
}

}  // namespace tandem::fuzz
