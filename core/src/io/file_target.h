#pragma once
// Where AtomicFile writes: the end of a path's symlink chain, checked to be a regular file or a new name in an
// existing directory. Shared by AtomicFile and check_writable so that both apply the same rule.

#include <sys/stat.h>

#include <string>

namespace tandem::detail {

struct FileTarget {
  std::string path;       // the end of the symlink chain, e.g. "runs/7/model.safetensors"
  std::string directory;  // its directory ("." for a bare name)
  std::string name;       // its last component
  bool exists = false;    // when true, `status` is its lstat(), a regular file
  struct stat status {};
};

// Follows `path` through symlinks (at most 40 hops; a relative link is read against the link's directory) to the
// file that a write should replace. Throws Error when the chain loops or cannot be read, when the end exists and is
// not a regular file or is read-only (no write permission bit at all, or not writable by this process), or when the
// end does not exist and its directory is missing or not a directory.
FileTarget resolve_file_target(const std::string& path, const char* caller);

// "<caller>: cannot write '<path>'", plus " (through symlinks: '<target>')" when the two differ: the start of every
// error message about writing `path`.
std::string cannot_write(const char* caller, const std::string& path, const std::string& target);

}  // namespace tandem::detail
