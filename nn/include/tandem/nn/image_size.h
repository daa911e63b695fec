#pragma once
// nn::Size2d: the size arguments of the convolution and pooling layers, as PyTorch takes them: one value for both
// axes (3) or {height, width} ({3, 5}). A pooling's stride may be left out (Size2d{}): it is then the kernel size.

#include <cstdint>

#include "tandem/core/image_ops.h"

namespace tandem::nn {

class Size2d {
 public:
  Size2d() = default;                                         // not given
  Size2d(int64_t both) : value_{both, both}, given_(true) {}  // NOLINT(google-explicit-constructor): PyTorch's ints
  Size2d(int64_t height, int64_t width) : value_{height, width}, given_(true) {}

  bool given() const { return given_; }
  const Size2& value() const { return value_; }  // {height, width}; {0, 0} when not given
  int64_t height() const { return value_[0]; }
  int64_t width() const { return value_[1]; }

 private:
  Size2 value_{0, 0};
  bool given_ = false;
};

}  // namespace tandem::nn
