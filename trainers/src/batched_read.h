#pragma once
// BatchedRead: several float32 tensors of one device brought to the host with a single wait (Note [One read per
// epoch] in trainer.cpp). Each tensor added is flattened into one tensor on the device, which read() copies once.

#include <cstddef>
#include <vector>

#include "tandem/core/device.h"
#include "tandem/core/tensor.h"

namespace tandem::trainers {

class BatchedRead {
 public:
  explicit BatchedRead(Device device) : device_(device) {}

  // Queues `values` (float32, on the device, any shape, row-major order kept) and returns the index its values have
  // after read(). Nothing waits: the tensor may still be being computed. Errors: another device or dtype.
  size_t add(const Tensor& values);
  // One host wait for everything added; nothing to wait for when nothing was added. Errors: a second read().
  void read();
  // The values of the tensor added as `index`, after read().
  const std::vector<float>& values(size_t index) const { return values_.at(index); }

 private:
  Device device_;
  std::vector<Tensor> pending_;             // flattened, in the order added
  std::vector<std::vector<float>> values_;  // [index], after read()
  bool read_ = false;
};

}  // namespace tandem::trainers
