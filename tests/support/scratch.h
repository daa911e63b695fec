#pragma once
// Where tests write files: one directory per test process, <TMPDIR>/tandem_test_<pid>, made on first use and removed
// with everything in it when the process exits, whether its tests passed or failed. ctest runs every test case in a
// process of its own, so each test case writes under a directory of its own; the ctest fixture `tmpdir.check`
// (tests/CMakeLists.txt) fails when a run leaves anything behind in its private TMPDIR.

#include <string>

namespace tandem::testing {

// The test process's directory (made if it does not exist yet).
std::string scratch_dir();
// A path for a file named `name` inside scratch_dir(); nothing is created at the path itself.
std::string scratch_path(const std::string& name);
// The bytes of the file at `path` ("" when it cannot be read).
std::string file_text(const std::string& path);

}  // namespace tandem::testing
