#pragma once
// What every fuzz target shares: the libFuzzer entry point and the contract it checks.
//
// Contract: a parser of user files either succeeds or throws tandem::Error for any input. run_input() swallows
// tandem::Error (the documented way to reject an input) and nothing else, so any other exception escapes
// LLVMFuzzerTestOneInput, terminates the process and is reported as a crash; sanitizers report memory errors and
// undefined behaviour, libFuzzer's -timeout slow inputs and -rss_limit_mb runaway allocations.

#include <cstddef>
#include <cstdint>

#include "tandem/core/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace tandem::fuzz {

template <class Body>
int run_input(Body&& body) {
  try {
    body();
  } catch (const Error&) {
    // Rejected with a message: the contract holds.
  }
  return 0;
}

}  // namespace tandem::fuzz
