#pragma once
// Writing a file so that readers see the old contents or the new, never a mix, and nothing is lost on any error:
// the bytes go to a uniquely named temp file in the target's directory, are flushed to disk, and the temp file is
// renamed over the target. Every file tandem writes (checkpoints, metrics, summaries) goes through this.
//
//   AtomicFile file(path, "save");
//   file.write(header.data(), header.size());
//   file.commit();  // without it, the destructor removes the temp file and `path` keeps its old contents
//
// The target is the end of `path`'s symlink chain: a link stays a link and its target receives the new bytes; a
// dangling link creates the file it points to. An existing target keeps its permission bits (and, when running as
// root, its owner); a new one gets 0666 & ~umask like any created file. A target that exists but is not a regular
// file (a directory, a device, a FIFO, a socket) is refused, so that /dev/null or a pipe is never replaced, and so is
// a read-only one (mode 0444, or one this process may not write), which its owner protected.
//
// Temp files are named ".<name>.tandem-tmp.<hostname>.<pid>.<counter>"; one left behind by a killed process is
// removed by the next writer of the same name on the same host.

#include <sys/types.h>

#include <cstddef>
#include <string>
#include <string_view>

namespace tandem {

// Writes a file so that readers see the old contents or the new, never a mix, and nothing is lost on any error.
class AtomicFile {
 public:
  // Resolves `path` through symlinks (the final target, which may not exist yet; its directory must), refuses a
  // target that exists and is not a regular file (directory, device, FIFO, socket) with an Error, removes stale
  // temp files of this naming pattern left by dead processes, and creates a uniquely named temp file in the real
  // target's directory. `caller` starts every error message.
  AtomicFile(const std::string& path, const char* caller);
  AtomicFile(const AtomicFile&) = delete;
  AtomicFile& operator=(const AtomicFile&) = delete;
  ~AtomicFile();  // removes the temp file unless committed; never throws

  // Error on a failed write (e.g. ENOSPC), naming the path; the temp file is removed at once and the target keeps
  // its old contents. Error after commit() or after an earlier failure.
  void write(const void* data, size_t size);
  void write(std::string_view text);
  // Replaces `size` bytes already written, from `offset` on (a value that becomes known only after the data that
  // follows it, such as a checksum in a header). Error as write(), and when the range reaches past the bytes written.
  void overwrite(size_t offset, const void* data, size_t size);
  // fsyncs the data, gives the temp file the target's permission bits (an existing target's mode; a new file gets
  // 0666 & ~umask like any created file), renames it over the real target and fsyncs the directory. An Error before
  // the rename leaves the target untouched and removes the temp file; an Error from the directory sync says that
  // the rename already happened (the new contents are in place but may not survive a power loss).
  void commit();
  const std::string& target() const { return target_; }  // the resolved real path written

 private:
  std::string cannot_write() const;  // the start of every error message
  void check_open(const char* operation) const;
  // Writes all `size` bytes at the end of the file (offset < 0) or from `offset` on.
  void write_at(const void* data, size_t size, off_t offset);
  void copy_target_permissions();
  void sync_directory() const;
  void discard() noexcept;  // closes and removes the temp file
  // Discards the temp file, then throws "<cannot_write()>: <step> failed: <strerror(error)>".
  [[noreturn]] void fail(const std::string& step, int error);

  std::string path_;       // as given, for messages
  std::string target_;     // the end of the symlink chain
  std::string directory_;  // target_'s directory, where the temp file lives
  std::string temp_path_;  // empty once the temp file is gone (renamed or removed)
  std::string caller_;
  int fd_ = -1;         // open on temp_path_ until commit() or a failure
  size_t written_ = 0;  // bytes written so far
  bool committed_ = false;
};

// AtomicFile(path, caller), write(contents), commit().
void write_file_atomically(const std::string& path, std::string_view contents, const char* caller);

// Throws Error now when a later AtomicFile(path) would fail: the target's directory is missing or not a directory or
// not writable (access(W_OK|X_OK)), the target exists and is not a regular file or is read-only, the symlink chain
// is broken/looping, or the temp file cannot be created there (it is created and removed: the proof). For checking
// output paths before a long run starts. Passing is no promise (the disk may fill, the directory may go away).
void check_writable(const std::string& path, const char* caller);

}  // namespace tandem
