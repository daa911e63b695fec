#include "support/scratch.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <system_error>

namespace tandem::testing {
namespace {

namespace fs = std::filesystem;

// Made on first use; its destructor runs at exit. Processes forked by a test inherit the object but not the
// directory's ownership: only the process that made it removes it.
class ProcessScratch {
 public:
  ProcessScratch()
      : owner_(getpid()), path_(fs::path(::testing::TempDir()) / ("tandem_test_" + std::to_string(owner_))) {
    fs::create_directories(path_);
  }
  ProcessScratch(const ProcessScratch&) = delete;
  ProcessScratch& operator=(const ProcessScratch&) = delete;
  ~ProcessScratch() {
    if (getpid() != owner_) return;
    std::error_code ignored;
    // A test may leave a read-only directory behind (permission tests): make every directory writable first.
    for (auto it = fs::recursive_directory_iterator(path_, ignored); it != fs::recursive_directory_iterator();
         it.increment(ignored)) {
      if (it->is_directory(ignored) && !it->is_symlink(ignored)) {
        fs::permissions(it->path(), fs::perms::owner_all, fs::perm_options::add, ignored);
      }
    }
    fs::remove_all(path_, ignored);
  }
  const fs::path& path() const { return path_; }

 private:
  pid_t owner_;
  fs::path path_;
};

const ProcessScratch& process_scratch() {
  static const ProcessScratch scratch;
  return scratch;
}

}  // namespace

std::string scratch_dir() { return process_scratch().path().string(); }

std::string scratch_path(const std::string& name) { return (process_scratch().path() / name).string(); }

std::string file_text(const std::string& path) {
  std::ifstream file(path, std::ios::binary);
  return {std::istreambuf_iterator<char>(file), std::istreambuf_iterator<char>()};
}

}  // namespace tandem::testing
