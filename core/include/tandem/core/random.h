#pragma once
// The global generator: one seed, a default stream and one stream per device (Note [Generator streams]). Uniform
// values (Tensor::rand, Tensor::uniform, and so Dropout's masks) for a GPU are computed there by a kernel, others on
// the host and copied (Note [Random draws in captured graphs]); either way a value depends only on its stream and its
// position there, never on the device it fills.

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

// Note [Random draws in captured graphs]: Tensor::rand and Tensor::uniform on a CUDA device fill the tensor with a
// kernel (cuda/device_draws.cpp): element i is uniform_value(splitmix64(key, first + i)) (core/src/uniform_value.h,
// the rule random::uniform follows on the host, each float64 operation rounded on its own), where [first, first + n)
// are the n values reserved from the drawing thread's stream when the call is made, exactly as the host draw
// reserves them. So a GPU draw equals the host draw of the same stream and counter bit for bit, advances the counter
// alike, and copies nothing from the host.
// While a DeviceGraph captures the device's compute stream, a draw reserves nothing: it is recorded in the graph
// (cuda/captured_draws.h) as the draw's offset within one replay in its stream (the values of that stream the capture
// recorded before it), and the kernel is captured reading its stream's key and base counter from a slot in device
// memory, so every replay draws values of its own. Before each launch, DeviceGraph::replay reserves from each stream
// recorded the number of values one replay draws from it (the counter moves on as the eager draws would move it), and
// writes [key, base] into the slots with one asynchronous copy from pinned memory per device, on the device's compute
// stream, ordered before the launch (the slots of Note [Pinned upload slots] in cuda/staged_upload.cpp, as
// DeviceScalars uploads). So N replays of a captured step draw the values that N eager steps would draw, from the
// same streams at the same counters, and the host counters always say how far each stream went: generator_state()
// between replays is the eager run's, checkpoints restore exactly, and manual_seed or set_generator_state between
// replays takes effect at the next one (its key is uploaded too). Why the host writes the base rather than a kernel
// in the graph advancing a counter kept on the device: the host counter is the one truth that checkpoints, eager draws
// between replays and reseeding already use; a device-side counter would have to be written from it anyway whenever
// any of those happened, and the upload costs one copy per device and replay, no graph node.
// The stream is still the drawing thread's (Note [Generator streams]): a captured training step runs every replica on
// the capturing thread inside a GeneratorStreamGuard for its device (ReplicaThreads::Caller), so replica i's draws
// are recorded in device i's stream in the order its eager worker would make them.
// Tensor::randn (Box-Muller through log and cos, which CUDA's libm does not round as the host's does), randint and
// multinomial stay on the host for every device; called for a GPU while its stream is captured, they throw (the copy
// of their values could not be recorded), which makes a captured training step fall back to its eager form.

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
