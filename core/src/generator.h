#pragma once
// The global generator's streams as core's draws use them (random.cpp): the host draws of random.h, and the draws
// that GPU kernels make in place (cuda/device_draws.cpp; Note [Random draws in captured graphs] in random.h).

#include <cstdint>
#include <optional>

#include "tandem/core/device.h"

namespace tandem::detail {

// A stream of the generator (Note [Generator streams] in random.h): a device's, or the default stream (empty).
using GeneratorStream = std::optional<Device>;

// The calling thread's stream, as its GeneratorStreamGuard set it.
GeneratorStream current_stream();

// `count` consecutive values of a stream: value j is splitmix64(key, first + j).
struct Reservation {
  uint64_t key;
  uint64_t first;
};

// Takes the next `count` values of `stream` (thread-safe): its counter moves on by `count`.
Reservation reserve(const GeneratorStream& stream, uint64_t count);

}  // namespace tandem::detail
