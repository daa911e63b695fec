#include "process/file_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <thread>

#include "tandem/core/error.h"

namespace tandem::comm::detail {
namespace {

std::string system_reason() { return std::strerror(errno); }

// Closes a descriptor when the scope ends.
class FileDescriptor {
 public:
  explicit FileDescriptor(int fd) : fd_(fd) {}
  ~FileDescriptor() {
    if (fd_ >= 0) ::close(fd_);
  }
  FileDescriptor(const FileDescriptor&) = delete;
  FileDescriptor& operator=(const FileDescriptor&) = delete;
  int get() const { return fd_; }
  // Closes now, reporting whether close succeeded (on NFS, close is where written data reaches the server).
  bool close() {
    int fd = fd_;
    fd_ = -1;
    return ::close(fd) == 0;
  }

 private:
  int fd_;
};

// Reads exactly out.size() bytes from the current position, or fewer when the file ends first; returns the count.
size_t read_fully(int fd, std::span<std::byte> out, const std::string& path) {
  size_t done = 0;
  while (done < out.size()) {
    ssize_t got = ::read(fd, out.data() + done, out.size() - done);
    if (got < 0 && errno == EINTR) continue;
    TANDEM_CHECK(got >= 0, "comm::FileStore: reading ", excerpt(path, 200), " failed: ", system_reason());
    if (got == 0) break;
    done += static_cast<size_t>(got);
  }
  return done;
}

void write_fully(int fd, std::span<const std::byte> data, const std::string& path) {
  size_t done = 0;
  while (done < data.size()) {
    ssize_t put = ::write(fd, data.data() + done, data.size() - done);
    if (put < 0 && errno == EINTR) continue;
    TANDEM_CHECK(put > 0, "comm::FileStore: writing ", excerpt(path, 200), " failed: ", system_reason());
    done += static_cast<size_t>(put);
  }
}

// Opens the value at `path` for reading and sets `size` to its size; leaves `size` empty (and returns -1) when there
// is no such file. Non-blocking, so that a FIFO planted under a key cannot block the open.
// Errors: anything but a regular file.
int open_value(const std::string& path, std::optional<uint64_t>& size) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) return fd;  // absent (or removed by its owner between a listing and this open)
  struct stat status {};
  bool regular = ::fstat(fd, &status) == 0 && S_ISREG(status.st_mode);
  if (!regular) ::close(fd);
  TANDEM_CHECK(regular, "comm::FileStore: ", excerpt(path, 200),
               " is not a regular file but expected a value written by tandem");
  size = static_cast<uint64_t>(status.st_size);
  return fd;
}

}  // namespace

std::string FileStore::path_of(std::string_view key) const { return directory_ + "/" + std::string(key); }

void FileStore::set(std::string_view key, std::span<const std::byte> value) const {
  // The temporary name is unique per process and call, so that concurrent writers (a thread aborting while another
  // publishes) never share one.
  static std::atomic<uint64_t> counter{0};
  std::string target = path_of(key);
  std::string temporary =
      path_of(".tmp." + std::to_string(::getpid()) + "." + std::to_string(counter++) + "." + std::string(key));
  FileDescriptor file(::open(temporary.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644));
  TANDEM_CHECK(file.get() >= 0, "comm::FileStore: cannot create ", excerpt(temporary, 200), ": ", system_reason());
  try {
    write_fully(file.get(), value, temporary);
  } catch (...) {
    ::unlink(temporary.c_str());
    throw;
  }
  bool closed = file.close();
  if (!closed || ::rename(temporary.c_str(), target.c_str()) != 0) {
    std::string reason = system_reason();
    ::unlink(temporary.c_str());
    TANDEM_FAIL("comm::FileStore: cannot publish ", excerpt(target, 200), ": ", reason);
  }
}

std::optional<uint64_t> FileStore::try_read(std::string_view key, std::span<std::byte> out) const {
  std::string path = path_of(key);
  std::optional<uint64_t> size;
  FileDescriptor file(open_value(path, size));
  if (!size || *size != out.size()) return size;
  size_t got = read_fully(file.get(), out, path);
  // A value is never rewritten in place (only replaced by rename), so a short read means a file that something else
  // truncated; report it as the size that was found.
  return got == out.size() ? size : static_cast<uint64_t>(got);
}

std::optional<std::string> FileStore::try_read_text(std::string_view key, size_t max_bytes) const {
  std::string path = path_of(key);
  std::optional<uint64_t> size;
  FileDescriptor file(open_value(path, size));
  if (!size) return std::nullopt;
  std::string text(std::min<uint64_t>(*size, max_bytes), '\0');
  text.resize(read_fully(file.get(), std::as_writable_bytes(std::span<char>(text)), path));
  return text;
}

bool FileStore::contains(std::string_view key) const { return ::access(path_of(key).c_str(), F_OK) == 0; }

void FileStore::remove(std::string_view key) const noexcept { ::unlink(path_of(key).c_str()); }

void Backoff::sleep() {
  std::this_thread::sleep_for(next_);
  next_ = std::min(next_ * 2, std::chrono::microseconds(2000));
}

}  // namespace tandem::comm::detail
