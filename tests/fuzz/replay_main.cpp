// Replays fuzz inputs without libFuzzer: runs LLVMFuzzerTestOneInput once over every file of the directories (or
// files) named on the command line, in name order, and prints how many it ran. A crash, a sanitizer report or an
// exception other than tandem::Error ends the process with a failure, right after the name of the input that caused
// it; so does an input that runs longer than 10 s (libFuzzer's -timeout in run_fuzzers.sh). This is how the corpora
// run in every ctest build (fuzz.replay.<target>), with any compiler.
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "fuzz_target.h"

namespace {

namespace fs = std::filesystem;

constexpr unsigned kInputTimeoutSeconds = 10;

void on_input_timeout(int) {
  static const char message[] = "the input above timed out: a hang or a slow input\n";
  ssize_t ignored = ::write(STDERR_FILENO, message, sizeof(message) - 1);
  (void)ignored;
  ::_exit(1);
}

// The regular files under `argument` (itself when it is a file), sorted; empty when it does not exist.
std::vector<fs::path> inputs_of(const fs::path& argument) {
  std::vector<fs::path> paths;
  if (fs::is_regular_file(argument)) {
    paths.push_back(argument);
  } else if (fs::is_directory(argument)) {
    for (const auto& entry : fs::recursive_directory_iterator(argument)) {
      if (entry.is_regular_file()) paths.push_back(entry.path());
    }
  }
  std::sort(paths.begin(), paths.end());
  return paths;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s DIRECTORY_OR_FILE...\n", argv[0]);
    return 2;
  }
  std::signal(SIGALRM, on_input_timeout);
  size_t total = 0;
  for (int i = 1; i < argc; ++i) {
    const std::vector<fs::path> paths = inputs_of(argv[i]);
    if (paths.empty()) {
      std::fprintf(stderr, "%s: '%s' is not a file or a directory with files\n", argv[0], argv[i]);
      return 2;
    }
    for (const fs::path& path : paths) {
      std::printf("replaying %s\n", path.c_str());
      std::fflush(stdout);
      std::ifstream in(path, std::ios::binary);
      const std::string bytes{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
      ::alarm(kInputTimeoutSeconds);
      LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
      ::alarm(0);
    }
    std::printf("%zu inputs from %s\n", paths.size(), argv[i]);
    total += paths.size();
  }
  std::printf("replayed %zu inputs\n", total);
  return 0;
}
