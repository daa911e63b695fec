#pragma once
// SplitMix64: a sequence of 64-bit values made by stepping a state by a fixed odd constant and scrambling each state
// with a finalizer. The one home of its constants, shared by the counter-based global generator (random.h) and the
// loader's shuffle generator (trainers/loader.h). Usable in CUDA kernels too (the device-side uniform fill).

#include <cstdint>

#include "tandem/core/host_device.h"

namespace tandem {

// How far the state moves per value (an odd constant, so the states visit all 2^64 words before repeating).
inline constexpr uint64_t kSplitMix64Step = 0x9E3779B97F4A7C15ull;

// The finalizer: a bijection of 64-bit words in which every input bit affects every output bit.
TANDEM_HOST_DEVICE constexpr uint64_t splitmix64_mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Value `index` (from 0) of the sequence that starts at `state`: a generator in `state` returns values 0, 1, 2, ...
// and is in state + (index + 1) * kSplitMix64Step after value `index`.
TANDEM_HOST_DEVICE constexpr uint64_t splitmix64(uint64_t state, uint64_t index) {
  return splitmix64_mix(state + (index + 1) * kSplitMix64Step);
}

}  // namespace tandem
