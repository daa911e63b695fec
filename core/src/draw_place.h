#pragma once
// DrawPlace: where the values that a kernel draws lie in their generator stream, for the kernels that draw in place
// (the uniform fill, fused attention's dropout; Note [Random draws in captured graphs] in tandem/core/random.h), and
// DropoutMask, nn::dropout's rule for the kernels that drop in place.

#include <cmath>
#include <cstdint>

#include "tandem/core/host_device.h"
#include "tandem/core/splitmix64.h"

namespace tandem::detail {

// Eager: value i is splitmix64(key, first + i). Captured (words set): the key is words[0] and value i is
// splitmix64(key, words[1] + first + i), read from device memory when the kernel runs, so that each replay of a graph
// draws from the position the host wrote before it.
struct DrawPlace {
  const uint64_t* words = nullptr;
  uint64_t key = 0;
  uint64_t first = 0;

  // The eager place of the same values: a kernel resolves a captured place once, then draws from it.
  TANDEM_HOST_DEVICE DrawPlace resolved() const {
    return words == nullptr ? *this : DrawPlace{nullptr, words[0], words[1] + first};
  }
  // Value i of a resolved place.
  TANDEM_HOST_DEVICE uint64_t bits(uint64_t i) const { return splitmix64(key, first + i); }
};

// A dropout mask drawn in place (fused attention's dropout on its probabilities): element i is kept when value i of
// `place` passes the threshold, and then scaled by `scale`, else zeroed. threshold 0 keeps every element unscaled.
//
// Note [Dropout thresholds]: nn::dropout keeps an element when its uniform value u = uniform_value(bits, 0, 1) has
// u >= float(p) (Note [Dropout masks] in nn/dropout.h). For [0, 1), u is exactly (bits >> 40) * 2^-24 (24 bits, which
// float32 holds), so u >= float(p) exactly when bits >> 40 >= ceil(float(p) * 2^24): one integer comparison per
// element in the kernels, the same mask bit for bit (tests/core/draw_place_test.cpp checks the two rules agree).
struct DropoutMask {
  uint32_t threshold = 0;
  float scale = 1.0f;
  DrawPlace place;

  // The mask of probability p (0 <= p < 1) at `place`; scale is float(1 / (1 - p)), as nn::dropout scales.
  static DropoutMask of(double p, DrawPlace place) {
    const double t = std::ceil(static_cast<double>(static_cast<float>(p)) * 0x1.0p24);
    return {static_cast<uint32_t>(t), static_cast<float>(1.0 / (1.0 - p)), place};
  }
  TANDEM_HOST_DEVICE bool active() const { return threshold > 0; }
  // The same mask with its place resolved (DrawPlace::resolved): what a kernel draws from.
  TANDEM_HOST_DEVICE DropoutMask resolved() const { return {threshold, scale, place.resolved()}; }
  // The factor of element i of a resolved mask: 0 or scale.
  TANDEM_HOST_DEVICE float factor(uint64_t i) const {
    return static_cast<uint32_t>(place.bits(i) >> 40) >= threshold ? scale : 0.0f;
  }
};

}  // namespace tandem::detail
