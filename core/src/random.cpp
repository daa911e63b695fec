#include "tandem/core/random.h"

#include <cmath>
#include <mutex>
#include <numbers>

#include "generator.h"
#include "tandem/core/splitmix64.h"
#include "uniform_value.h"

namespace tandem {

namespace {

// Note [Counter-based generator]: value i of a stream is a pure function of (key, i), so the whole generator state
// is the seed plus one counter per stream: checkpoints save and restore it exactly, and a value does not depend on
// which device it fills. The streams and their keys: Note [Generator streams] in random.h.
struct Generator {
  std::mutex mutex;
  GeneratorState state{.seed = 0x5eed, .counter = 0, .device_counters = {}};
};

Generator& global_generator() {
  static Generator generator;
  return generator;
}

// The calling thread's stream, set by GeneratorStreamGuard; empty: the default stream.
thread_local detail::GeneratorStream thread_stream;

uint64_t stream_key(uint64_t seed, const detail::GeneratorStream& stream) {
  if (!stream) return seed;
  // Distinct for every device (the index is non-negative), and never 0, which the finalizer would keep at 0.
  const uint64_t id = (static_cast<uint64_t>(stream->type()) + 1) << 32 | static_cast<uint64_t>(stream->index());
  return splitmix64_mix(seed ^ splitmix64_mix(id));
}

// `count` consecutive values of the calling thread's stream.
detail::Reservation reserve(size_t count) { return detail::reserve(thread_stream, count); }

__extension__ using Uint128 = unsigned __int128;  // GCC's and Clang's; __extension__ keeps -Wpedantic quiet

}  // namespace

namespace detail {

GeneratorStream current_stream() { return thread_stream; }

Reservation reserve(const GeneratorStream& stream, uint64_t count) {
  Generator& generator = global_generator();
  std::lock_guard<std::mutex> lock(generator.mutex);
  GeneratorState& state = generator.state;
  uint64_t& counter = stream ? state.device_counters[*stream] : state.counter;
  const uint64_t first = counter;
  counter += count;
  return {stream_key(state.seed, stream), first};
}

}  // namespace detail

void manual_seed(uint64_t seed) { set_generator_state({.seed = seed, .counter = 0, .device_counters = {}}); }

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

GeneratorStreamGuard::GeneratorStreamGuard(Device device) : previous_(thread_stream) { thread_stream = device; }

GeneratorStreamGuard::~GeneratorStreamGuard() { thread_stream = previous_; }

namespace random {

std::vector<float> uniform(size_t count, float low, float high) {
  std::vector<float> values(count);  // first, so that running out of memory draws nothing
  const detail::Reservation drawn = reserve(count);
  for (size_t i = 0; i < count; ++i) {
    values[i] = detail::uniform_value(splitmix64(drawn.key, drawn.first + i), low, high);
  }
  return values;
}

std::vector<float> normal(size_t count) {
  std::vector<float> values(count);
  const detail::Reservation drawn = reserve(2 * count);
  for (size_t i = 0; i < count; ++i) {
    // Box-Muller on two independent uniforms; 1 - u keeps the logarithm's argument in (0, 1].
    const double u1 = 1.0 - detail::unit_from_bits(splitmix64(drawn.key, drawn.first + 2 * i));
    const double u2 = detail::unit_from_bits(splitmix64(drawn.key, drawn.first + 2 * i + 1));
    values[i] = static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2));
  }
  return values;
}

std::vector<int64_t> integers(size_t count, int64_t low, int64_t high) {
  std::vector<int64_t> values(count);
  const detail::Reservation drawn = reserve(count);
  const uint64_t span = static_cast<uint64_t>(high) - static_cast<uint64_t>(low);  // in [1, 2^64 - 1]
  for (size_t i = 0; i < count; ++i) {
    const uint64_t offset = static_cast<uint64_t>(Uint128{splitmix64(drawn.key, drawn.first + i)} * span >> 64);
    values[i] = static_cast<int64_t>(static_cast<uint64_t>(low) + offset);  // wraps into [low, high)
  }
  return values;
}

std::vector<double> unit_doubles(size_t count) {
  std::vector<double> values(count);
  const detail::Reservation drawn = reserve(count);
  for (size_t i = 0; i < count; ++i)
    values[i] = static_cast<double>(splitmix64(drawn.key, drawn.first + i) >> 11) * 0x1.0p-53;
  return values;
}

uint64_t next_u64() {
  const detail::Reservation drawn = reserve(1);
  return splitmix64(drawn.key, drawn.first);
}

}  // namespace random
}  // namespace tandem
