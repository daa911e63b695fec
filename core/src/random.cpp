#include "tandem/core/random.h"

#include <cmath>
#include <mutex>
#include <numbers>

namespace tandem {

namespace {

// Note [Counter-based generator]: value i of the stream is a pure function of (seed, i) (a SplitMix64 finalizer
// over seed and counter), so the whole generator state is two integers: checkpoints save and restore it exactly,
// and the values do not depend on which device or thread asked for them.
struct Generator {
  std::mutex mutex;
  GeneratorState state{.seed = 0x5eed, .counter = 0};
};

Generator& global_generator() {
  static Generator generator;
  return generator;
}

uint64_t mix(uint64_t seed, uint64_t counter) {
  uint64_t z = seed + (counter + 1) * 0x9E3779B97F4A7C15ull;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Reserves `count` consecutive counters and returns the first.
uint64_t reserve(size_t count, uint64_t* seed) {
  Generator& generator = global_generator();
  std::lock_guard<std::mutex> lock(generator.mutex);
  *seed = generator.state.seed;
  const uint64_t first = generator.state.counter;
  generator.state.counter += count;
  return first;
}

// Uniform in [0, 1) with 24 random bits: exactly representable in float32.
double unit(uint64_t bits) { return static_cast<double>(bits >> 40) * 0x1.0p-24; }

}  // namespace

void manual_seed(uint64_t seed) { set_generator_state({.seed = seed, .counter = 0}); }

GeneratorState generator_state() {
  Generator& generator = global_generator();
  std::lock_guard<std::mutex> lock(generator.mutex);
  return generator.state;
}

void set_generator_state(const GeneratorState& state) {
  Generator& generator = global_generator();
  std::lock_guard<std::mutex> lock(generator.mutex);
  generator.state = state;
}

namespace random {

std::vector<float> uniform(size_t count, float low, float high) {
  uint64_t seed = 0;
  const uint64_t first = reserve(count, &seed);
  std::vector<float> values(count);
  const double span = static_cast<double>(high) - low;
  for (size_t i = 0; i < count; ++i) {
    const float value = static_cast<float>(low + span * unit(mix(seed, first + i)));
    values[i] = value < high ? value : std::nextafter(high, low);  // rounding must not reach `high`
  }
  return values;
}

std::vector<float> normal(size_t count) {
  uint64_t seed = 0;
  const uint64_t first = reserve(2 * count, &seed);
  std::vector<float> values(count);
  for (size_t i = 0; i < count; ++i) {
    // Box-Muller on two independent uniforms; 1 - u keeps the logarithm's argument in (0, 1].
    const double u1 = 1.0 - unit(mix(seed, first + 2 * i));
    const double u2 = unit(mix(seed, first + 2 * i + 1));
    values[i] = static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2));
  }
  return values;
}

uint64_t next_u64() {
  uint64_t seed = 0;
  const uint64_t first = reserve(1, &seed);
  return mix(seed, first);
}

}  // namespace random
}  // namespace tandem
