#include "io/temp_files.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <charconv>
#include <climits>
#include <cstdint>

namespace tandem::detail {
namespace {

// Note [Temp file names]
// A temp file is named ".<name>.tandem-tmp.<hostname>.<pid>.<counter>" and lives in the target's directory:
// - In that directory, because rename() replaces a file atomically only within one file system, and the directory
//   is the one place sure to be on the target's. The leading dot keeps it out of `ls` and of globs like *.json.
// - <counter>, a process-wide atomic, tells apart the AtomicFile objects of one process (two threads writing one
//   path, or two objects alive at once). O_EXCL makes the creation fail rather than share a file whose name is
//   taken anyway (left by an earlier process that had the same pid), and the next counter is tried.
// - <pid> lets a later writer tell whether the one that made the file is still alive. A run killed while writing
//   (SIGKILL, the OOM killer, a lost node) never reaches a destructor, and its temp file, as large as a checkpoint,
//   would stay forever. The sweep removes only temps whose pid no longer exists (kill(pid, 0) fails with ESRCH):
//   a live process, even another user's (EPERM), may be writing its temp right now, and removing the file would
//   make its commit fail. A pid that was reused only keeps a stale temp a while longer.
// - <hostname>, because a pid means nothing on another machine: on a shared file system (NFS, Lustre) processes on
//   other nodes write into the same directory, and their live pids look dead here. The sweep touches this host's
//   temps only.
// Names stay under NAME_MAX (255): the target's name is cut to 128 bytes in the pattern (two long names that share
// those bytes share a pattern, and the sweep then removes either one's stale temps, which is harmless) and the
// hostname to 64.
constexpr std::string_view kMarker = ".tandem-tmp.";
constexpr size_t kMaxNameInPattern = 128;
constexpr size_t kMaxHostnameInPattern = 64;
constexpr int kCreateAttempts = 1000;

// This host's name, restricted to characters that are safe in a file name.
const std::string& hostname() {
  static const std::string name = [] {
    char buffer[256] = {};
    std::string host = ::gethostname(buffer, sizeof(buffer) - 1) == 0 && buffer[0] != '\0' ? buffer : "unknown-host";
    host.resize(std::min(host.size(), kMaxHostnameInPattern));
    for (char& c : host) {
      const bool safe = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' ||
                        c == '_' || c == '.';
      if (!safe) c = '_';
    }
    return host;
  }();
  return name;
}

std::atomic<uint64_t> next_counter{0};

// The pid of a temp file name's "<pid>.<counter>" tail, or 0 when the tail has another form.
pid_t pid_of_tail(std::string_view tail) {
  uint64_t pid = 0;
  const auto [pid_end, pid_error] = std::from_chars(tail.data(), tail.data() + tail.size(), pid);
  if (pid_error != std::errc() || pid == 0 || pid > static_cast<uint64_t>(INT_MAX)) return 0;
  std::string_view rest = tail.substr(static_cast<size_t>(pid_end - tail.data()));
  if (rest.size() < 2 || rest.front() != '.') return 0;
  uint64_t counter = 0;
  const auto [counter_end, counter_error] = std::from_chars(rest.data() + 1, rest.data() + rest.size(), counter);
  if (counter_error != std::errc() || counter_end != rest.data() + rest.size()) return 0;
  return static_cast<pid_t>(pid);
}

}  // namespace

std::string temp_file_prefix(std::string_view name) {
  std::string prefix(1, '.');
  prefix.append(name.substr(0, kMaxNameInPattern)).append(kMarker).append(hostname()).push_back('.');
  return prefix;
}

int create_temp_file(const std::string& directory, std::string_view name, std::string& temp_path) {
  const std::string prefix = directory + "/" + temp_file_prefix(name) + std::to_string(::getpid()) + ".";
  for (int attempt = 0; attempt < kCreateAttempts; ++attempt) {
    temp_path = prefix + std::to_string(next_counter.fetch_add(1));
    int fd;
    do {
      fd = ::open(temp_path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    } while (fd < 0 && errno == EINTR);
    if (fd >= 0 || errno != EEXIST) return fd;
  }
  return -1;  // errno is EEXIST
}

void remove_stale_temp_files(const std::string& directory, std::string_view name) noexcept {
  std::string prefix;
  try {
    prefix = temp_file_prefix(name);
  } catch (...) {
    return;  // out of memory: the stale files wait for the next writer
  }
  DIR* listing = ::opendir(directory.c_str());
  if (listing == nullptr) return;
  while (const dirent* entry = ::readdir(listing)) {
    const std::string_view entry_name = entry->d_name;
    if (!entry_name.starts_with(prefix)) continue;
    const pid_t pid = pid_of_tail(entry_name.substr(prefix.size()));
    if (pid == 0 || ::kill(pid, 0) == 0 || errno != ESRCH) continue;
    ::unlinkat(::dirfd(listing), entry->d_name, 0);
  }
  ::closedir(listing);
}

}  // namespace tandem::detail
