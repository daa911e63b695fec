#pragma once
// A key-value store over one directory of a file system that several processes share: each key is a file named
// after it, and each value is written whole (a temporary file renamed over the key), so a reader sees either no value
// or every byte of one. No locks and no network: the file channel (file_channel.cpp, Note [File rendezvous]) builds
// its rendezvous and collectives on it. Keys are file names (no '/'); names that start with '.' are the store's own
// temporary files.

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace tandem::comm::detail {

class FileStore {
 public:
  explicit FileStore(std::string directory) : directory_(std::move(directory)) {}

  const std::string& directory() const { return directory_; }
  std::string path_of(std::string_view key) const;

  // Publishes `value` under key, replacing any earlier value. Safe from several threads at once.
  // Errors: the directory missing or not writable (the message names the file and the system's reason).
  void set(std::string_view key, std::span<const std::byte> value) const;
  // Reads key's value into `out`. Returns nullopt when the key is absent; otherwise the size of the value, which has
  // been read into `out` only when it equals out.size() (a value of any other size is left unread).
  // Errors: something other than a regular file under key; a read that fails after the file was opened.
  std::optional<uint64_t> try_read(std::string_view key, std::span<std::byte> out) const;
  // At most the first max_bytes of key's value; nullopt when the key is absent. Errors: as try_read.
  std::optional<std::string> try_read_text(std::string_view key, size_t max_bytes) const;
  bool contains(std::string_view key) const;
  // Removes key when present; never throws (cleaning up is best effort).
  void remove(std::string_view key) const noexcept;

 private:
  std::string directory_;
};

// The sleeps of a poll loop: 50 us at first, doubling up to 2 ms, so that a value that arrives quickly is seen
// quickly and a long wait costs little.
class Backoff {
 public:
  void sleep();

 private:
  std::chrono::microseconds next_{50};
};

}  // namespace tandem::comm::detail
