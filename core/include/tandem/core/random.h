#pragma once
// The global generator. Values are generated on the host and copied to the device, so the same seed gives the
// same tensor on every device, and a model initialized on CPU equals one initialized on a GPU.

#include <cstddef>
#include <cstdint>
#include <vector>

namespace tandem {

void manual_seed(uint64_t seed);

// The full generator state, for checkpoints: restoring it continues the exact same stream of values.
struct GeneratorState {
  uint64_t seed = 0;
  uint64_t counter = 0;
};
GeneratorState generator_state();
void set_generator_state(const GeneratorState& state);

namespace random {
// Draws from the global generator (thread-safe).
std::vector<float> normal(size_t count);                      // N(0, 1)
std::vector<float> uniform(size_t count, float low, float high);  // U[low, high)
uint64_t next_u64();
}  // namespace random

}  // namespace tandem
