#pragma once
// The file of PyTorch's own results that tests/nn/torch_replay/make_replay.py writes where PyTorch is installed, for
// the torch replay tests. The environment variable TANDEM_TORCH_REPLAY names it; without it the tests skip, saying how
// to make one.

#include <gtest/gtest.h>

#include <cstdlib>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

namespace tandem::testing {

// The replay file (read once per process), or nullptr with `reason` set to why there is none.
inline const nlohmann::json* torch_replay(std::string& reason) {
  static nlohmann::json file;
  static std::string why_not;
  static const bool loaded = [] {
    const char* path = std::getenv("TANDEM_TORCH_REPLAY");
    if (path == nullptr || *path == '\0') {
      why_not =
          "TANDEM_TORCH_REPLAY is not set: run tests/nn/torch_replay/make_replay.py OUT.json where PyTorch is "
          "installed and point TANDEM_TORCH_REPLAY at OUT.json";
      return false;
    }
    std::ifstream in(path);
    if (!in) {
      why_not = std::string("TANDEM_TORCH_REPLAY names '") + path + "', which cannot be opened";
      return false;
    }
    file = nlohmann::json::parse(in);  // a broken file fails the test that reads it
    return true;
  }();
  reason = why_not;
  return loaded ? &file : nullptr;
}

}  // namespace tandem::testing

// Declares `const nlohmann::json* name`, the replay file, or skips the test saying why there is none.
#define TANDEM_REQUIRE_REPLAY(name)                                          \
  std::string skip_reason;                                                   \
  const nlohmann::json* name = ::tandem::testing::torch_replay(skip_reason); \
  if (name == nullptr) GTEST_SKIP() << skip_reason
