#include "io/byte_source.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "io/file_kind.h"
#include "tandem/core/error.h"

namespace tandem {
namespace {

std::string errno_text() { return std::strerror(errno); }

}  // namespace

void ByteSource::read(uint64_t offset, void* out, size_t length) {
  TANDEM_INTERNAL_ASSERT(offset <= size_ && length <= size_ - offset, where_, "reading ", length, " bytes at byte ",
                         offset, " of a source of ", size_, " bytes");
  if (length > 0) read_within(offset, out, length);
}

// Note [Opening untrusted paths]: open(2) on a FIFO blocks until a writer appears, and read(2) on a FIFO or a device
// such as /dev/zero may never end. O_NONBLOCK makes the open return at once; fstat then admits regular files only,
// whose size is known, and O_NONBLOCK is cleared again for the reads.
FileByteSource::Opened FileByteSource::open_regular_file(const std::string& path, const std::string& where) {
  int fd = -1;
  do {
    fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  } while (fd < 0 && errno == EINTR);
  TANDEM_CHECK(fd >= 0, where, "cannot open the file: ", errno_text());
  struct stat info {};
  std::string problem;
  if (::fstat(fd, &info) != 0) {
    problem = "fstat failed: " + errno_text();
  } else if (!S_ISREG(info.st_mode)) {
    problem = std::string("it is ") + io::kind_of_file(info.st_mode) + ", but only regular files can be read";
  } else if (const int flags = ::fcntl(fd, F_GETFL); flags < 0 || ::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK) != 0) {
    problem = "fcntl failed: " + errno_text();
  }
  if (!problem.empty()) {
    ::close(fd);
    TANDEM_FAIL(where, problem);
  }
  return {fd, static_cast<uint64_t>(info.st_size)};
}

FileByteSource::FileByteSource(const std::string& path, std::string where)
    : FileByteSource(open_regular_file(path, where), std::move(where)) {}

FileByteSource::FileByteSource(Opened opened, std::string&& where)
    : ByteSource(opened.size, std::move(where)), fd_(opened.fd) {}

FileByteSource::~FileByteSource() { ::close(fd_); }

void FileByteSource::read_within(uint64_t offset, void* out, size_t length) {
  char* bytes = static_cast<char*>(out);
  while (length > 0) {
    const ssize_t got = ::pread(fd_, bytes, length, static_cast<off_t>(offset));
    if (got < 0 && errno == EINTR) continue;
    TANDEM_CHECK(got >= 0, where(), "reading ", length, " bytes at byte ", offset, " failed: ", errno_text());
    TANDEM_CHECK(got > 0, where(), "the file ends at byte ", offset, " but had ", size(),
                 " bytes when it was opened: it shrank while being read");
    bytes += got;
    offset += static_cast<uint64_t>(got);
    length -= static_cast<size_t>(got);
  }
}

void MemoryByteSource::read_within(uint64_t offset, void* out, size_t length) {
  std::memcpy(out, bytes_.data() + offset, length);
}

}  // namespace tandem
