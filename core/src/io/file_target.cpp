#include "io/file_target.h"

#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <string>

#include "io/file_kind.h"
#include "tandem/core/error.h"

namespace tandem::detail {
namespace {

// Linux's own bound (MAXSYMLINKS) on the links followed in one path lookup.
constexpr int kMaxSymlinkHops = 40;

// "0444": the permission bits, as chmod takes them.
std::string mode_text(mode_t mode) {
  char text[8];
  std::snprintf(text, sizeof(text), "%04o", static_cast<unsigned>(mode & 07777));
  return text;
}

std::string read_link(const std::string& link, const char* caller, const std::string& path) {
  std::string text(256, '\0');
  while (true) {
    const ssize_t length = ::readlink(link.c_str(), text.data(), text.size());
    if (length < 0) {
      const int error = errno;
      TANDEM_FAIL(cannot_write(caller, path, link), ": reading the symlink failed: ", std::strerror(error));
    }
    if (static_cast<size_t>(length) < text.size()) {
      text.resize(static_cast<size_t>(length));
      return text;
    }
    text.resize(text.size() * 2);  // the link text may have been cut: read again with more room
  }
}

// Where `link` points: an absolute target as is, a relative one appended to the link's own directory. No lexical
// clean-up: "dir/../x" must keep going through "dir", as the kernel would, when "dir" is itself a symlink.
std::string follow(const std::string& link, const std::string& text) {
  if (text.front() == '/') return text;
  const size_t slash = link.rfind('/');
  return slash == std::string::npos ? text : link.substr(0, slash + 1) + text;
}

}  // namespace

std::string cannot_write(const char* caller, const std::string& path, const std::string& target) {
  std::string message = std::string(caller) + ": cannot write '" + path + "'";
  if (target != path) message += " (through symlinks: '" + target + "')";
  return message;
}

FileTarget resolve_file_target(const std::string& path, const char* caller) {
  TANDEM_CHECK(!path.empty(), caller, ": cannot write '': the path is empty");
  FileTarget target;
  target.path = path;
  for (int hops = 0;; ++hops) {
    if (::lstat(target.path.c_str(), &target.status) != 0) {
      const int error = errno;
      TANDEM_CHECK(error == ENOENT, cannot_write(caller, path, target.path), ": ", std::strerror(error));
      break;  // a new file; its directory is checked below
    }
    if (!S_ISLNK(target.status.st_mode)) {
      target.exists = true;
      break;
    }
    TANDEM_CHECK(hops < kMaxSymlinkHops, cannot_write(caller, path, target.path),
                 ": too many levels of symbolic links (more than ", kMaxSymlinkHops, "; a loop?)");
    const std::string text = read_link(target.path, caller, path);
    TANDEM_CHECK(!text.empty(), cannot_write(caller, path, target.path), ": the symlink is empty");
    target.path = follow(target.path, text);
  }

  TANDEM_CHECK(!target.exists || S_ISREG(target.status.st_mode), cannot_write(caller, path, target.path), ": it is ",
               io::kind_of_file(target.status.st_mode), " but expected a regular file (or a new name)");
  // A file protected from writing is never replaced, even by a user (root) whom the permission bits would not stop.
  const bool read_only = target.exists && ((target.status.st_mode & (S_IWUSR | S_IWGRP | S_IWOTH)) == 0 ||
                                           (::access(target.path.c_str(), W_OK) != 0 && errno == EACCES));
  TANDEM_CHECK(!read_only, cannot_write(caller, path, target.path), ": it is read-only (mode ",
               mode_text(target.status.st_mode), "); make it writable, or write somewhere else, to replace it");
  const size_t slash = target.path.rfind('/');
  target.directory = slash == std::string::npos ? "." : slash == 0 ? "/" : target.path.substr(0, slash);
  target.name = slash == std::string::npos ? target.path : target.path.substr(slash + 1);
  TANDEM_CHECK(!target.name.empty() && target.name != "." && target.name != "..",
               cannot_write(caller, path, target.path), ": the path names a directory but expected a file");
  if (target.exists) return target;
  struct stat directory {};
  if (::stat(target.directory.c_str(), &directory) != 0) {
    const int error = errno;
    TANDEM_FAIL(
        cannot_write(caller, path, target.path), ": the directory '", target.directory, "' ",
        error == ENOENT ? std::string("does not exist") : std::string("cannot be read: ") + std::strerror(error));
  }
  TANDEM_CHECK(S_ISDIR(directory.st_mode), cannot_write(caller, path, target.path), ": '", target.directory, "' is ",
               io::kind_of_file(directory.st_mode), " but expected a directory");
  return target;
}

}  // namespace tandem::detail
