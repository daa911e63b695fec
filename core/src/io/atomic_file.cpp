#include "tandem/core/atomic_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "io/file_kind.h"
#include "io/file_target.h"
#include "io/temp_files.h"
#include "tandem/core/error.h"

namespace tandem {

AtomicFile::AtomicFile(const std::string& path, const char* caller) : path_(path), caller_(caller) {
  const detail::FileTarget target = detail::resolve_file_target(path, caller);
  target_ = target.path;
  directory_ = target.directory;
  detail::remove_stale_temp_files(target.directory, target.name);
  fd_ = detail::create_temp_file(target.directory, target.name, temp_path_);
  if (fd_ < 0) {
    const int error = errno;
    temp_path_.clear();
    TANDEM_FAIL(cannot_write(), ": creating a temp file in '", directory_, "' failed: ", std::strerror(error));
  }
}

AtomicFile::~AtomicFile() {
  if (!committed_) discard();
}

void AtomicFile::write(const void* data, size_t size) {
  check_open("write");
  write_at(data, size, -1);
  written_ += size;
}

void AtomicFile::overwrite(size_t offset, const void* data, size_t size) {
  check_open("overwrite");
  TANDEM_CHECK(offset <= written_ && size <= written_ - offset, cannot_write(), ": overwrite of ", size,
               " bytes at offset ", offset, " but only ", written_, " bytes are written");
  write_at(data, size, static_cast<off_t>(offset));
}

void AtomicFile::write_at(const void* data, size_t size, off_t offset) {
  const char* bytes = static_cast<const char*>(data);
  while (size > 0) {
    const ssize_t written = offset < 0 ? ::write(fd_, bytes, size) : ::pwrite(fd_, bytes, size, offset);
    const int error = written < 0 ? errno : ENOSPC;  // a write that takes nothing has found no room
    if (written < 0 && error == EINTR) continue;
    if (written <= 0) fail("writing '" + temp_path_ + "'", error);
    bytes += written;
    size -= static_cast<size_t>(written);
    if (offset >= 0) offset += written;
  }
}

void AtomicFile::write(std::string_view text) { write(text.data(), text.size()); }

void AtomicFile::commit() {
  check_open("commit");
  while (::fsync(fd_) != 0) {
    const int error = errno;
    if (error != EINTR) fail("fsync of '" + temp_path_ + "'", error);
  }
  copy_target_permissions();
  const int fd = fd_;
  fd_ = -1;
  if (::close(fd) != 0) {  // the descriptor is released either way
    const int error = errno;
    fail("closing '" + temp_path_ + "'", error);
  }
  if (::rename(temp_path_.c_str(), target_.c_str()) != 0) {
    const int error = errno;
    fail("renaming '" + temp_path_ + "' over it", error);
  }
  temp_path_.clear();
  committed_ = true;
  sync_directory();
}

std::string AtomicFile::cannot_write() const { return detail::cannot_write(caller_.c_str(), path_, target_); }

void AtomicFile::check_open(const char* operation) const {
  TANDEM_CHECK(fd_ >= 0, cannot_write(), ": ", operation, " after ",
               committed_ ? "commit()" : "an earlier error removed the temp file");
}

// The target as it is now, not as it was at construction: its mode may have changed while the data was written.
void AtomicFile::copy_target_permissions() {
  struct stat status {};
  if (::lstat(target_.c_str(), &status) != 0) {
    const int error = errno;
    if (error == ENOENT) return;  // a new file keeps the mode open() gave it: 0666 less the umask
    fail("lstat", error);
  }
  if (!S_ISREG(status.st_mode)) {
    const std::string kind = io::kind_of_file(status.st_mode);
    discard();
    TANDEM_FAIL(cannot_write(), ": it became ", kind, " while it was written but expected a regular file");
  }
  // Root may give the file its owner back (as root, a rewrite would otherwise take it over); chown before chmod,
  // since chown clears the set-user-ID bit.
  if (::geteuid() == 0 && ::fchown(fd_, status.st_uid, status.st_gid) != 0) {
    const int error = errno;
    if (error != EPERM) fail("fchown", error);
  }
  if (::fchmod(fd_, status.st_mode & 07777) != 0) {
    const int error = errno;
    fail("fchmod", error);
  }
}

void AtomicFile::sync_directory() const {
  const int fd = ::open(directory_.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int error = fd < 0 ? errno : 0;
  if (fd >= 0) {
    int result;
    do {
      result = ::fsync(fd);
    } while (result != 0 && errno == EINTR);
    error = result == 0 ? 0 : errno;
    ::close(fd);
  }
  TANDEM_CHECK(error == 0, cannot_write(), ": the new contents were renamed into place, but syncing the directory '",
               directory_, "' failed: ", std::strerror(error), " (the rename may not survive a power loss)");
}

void AtomicFile::discard() noexcept {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  if (!temp_path_.empty()) ::unlink(temp_path_.c_str());
  temp_path_.clear();
}

void AtomicFile::fail(const std::string& step, int error) {
  const std::string message = cannot_write() + ": " + step + " failed: " + std::strerror(error);
  discard();
  TANDEM_FAIL(message);
}

void write_file_atomically(const std::string& path, std::string_view contents, const char* caller) {
  AtomicFile file(path, caller);
  file.write(contents);
  file.commit();
}

void check_writable(const std::string& path, const char* caller) {
  const detail::FileTarget target = detail::resolve_file_target(path, caller);
  if (::access(target.directory.c_str(), W_OK | X_OK) != 0) {
    const int error = errno;
    TANDEM_FAIL(detail::cannot_write(caller, path, target.path), ": the directory '", target.directory,
                "' is not writable: ", std::strerror(error));
  }
  // The proof: the temp file a write starts with can be created there (a read-only mount, a full quota and
  // permissions that access() reports wrongly on network file systems all fail here, not after training).
  AtomicFile probe(path, caller);  // removed uncommitted when it goes out of scope
}

}  // namespace tandem
