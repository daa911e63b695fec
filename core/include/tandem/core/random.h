#pragma once
// The global generator: one seed, a default stream and one stream per device (Note [Generator streams]). Values are
// generated on the host and copied to the device they fill.

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <vector>

#include "tandem/core/device.h"

namespace tandem {

// Note [Generator streams]: the generator is a family of counter-based streams that share one seed: the default
// stream and a stream for each device. Value i of a stream is splitmix64(key, i) (splitmix64.h). The default
// stream's key is the seed itself; a device's stream has the key splitmix64_mix(seed ^ splitmix64_mix(device id)),
// another starting point in the 2^64 values of the SplitMix64 sequence for each device, so that the streams of one
// seed are independent in practice (two of them overlap only if their starting points lie closer than the number of
// values drawn).
//
// The stream a draw uses is chosen by the thread that draws, not by the device of the tensor it fills:
// - A thread inside a GeneratorStreamGuard(d) draws from d's stream. Every parallel worker holds one for its device
//   for its whole life (parallel/src/worker_pool.cpp), so a replica's forward on device d draws from d's stream.
// - Every other thread draws from the default stream. That is where models are initialized: on the caller's thread,
//   before they are replicated. So the same seed gives the same parameters whatever device they are created on
//   (manual_seed(s); Linear(10, 20) equals Linear(10, 20, true, cuda:0)), as the same seed gives the same tensor.
//
// Why results do not depend on thread timing: a device's stream is drawn from only by that device's worker, which
// runs its tasks one after another in submission order; so the k-th value of the stream always goes to the same draw
// of the same replica, however the workers interleave. A nested parallel call inside a replica runs its tasks on the
// replica's thread, so they too draw from that thread's stream, in order. Choosing the stream by the tensor's device
// instead would make initialization depend on the device, and two workers would share a stream as soon as a replica
// draws a tensor for another device (Tensor::rand's default device is cpu:0). Left to timing: threads started by
// the user that draw at once from the default stream (give each a guard of its own), and parallel calls made at once
// from several threads onto one device (their tasks interleave on that worker's queue).

// Sets the seed of every stream and rewinds them all to their start (every counter 0).
void manual_seed(uint64_t seed);

// The full generator state, for checkpoints: restoring it continues every stream exactly where it was.
struct GeneratorState {
  uint64_t seed = 0;
  uint64_t counter = 0;                        // values drawn from the default stream
  std::map<Device, uint64_t> device_counters;  // values drawn from each device's stream; a device not listed: 0

  friend bool operator==(const GeneratorState&, const GeneratorState&) = default;
};
GeneratorState generator_state();
void set_generator_state(const GeneratorState& state);

// While it lives, draws on the constructing thread use `device`'s stream (Note [Generator streams]); the destructor
// restores the thread's previous stream. Guards nest; create and destroy one on the same thread.
class GeneratorStreamGuard {
 public:
  explicit GeneratorStreamGuard(Device device);
  ~GeneratorStreamGuard();
  GeneratorStreamGuard(const GeneratorStreamGuard&) = delete;
  GeneratorStreamGuard& operator=(const GeneratorStreamGuard&) = delete;

 private:
  std::optional<Device> previous_;
};

namespace random {
// Draws from the calling thread's stream (thread-safe).
std::vector<float> normal(size_t count);                          // N(0, 1)
std::vector<float> uniform(size_t count, float low, float high);  // U[low, high)
// U{low, ..., high - 1} for low < high (unchecked), one value of the stream each: its 64 bits times the range's size,
// the high 64 bits of that product (multiply-shift), so a value is off uniform by at most (high - low) / 2^64.
std::vector<int64_t> integers(size_t count, int64_t low, int64_t high);
std::vector<double> unit_doubles(size_t count);  // U[0, 1) with 53 random bits
uint64_t next_u64();
}  // namespace random

}  // namespace tandem
