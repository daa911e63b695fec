#pragma once
// DeviceScalars: a few float32 values in device memory that the host refreshes without waiting for the device, for
// kernels that must read values which change between runs of a captured graph (Note [Hyper-parameters in device
// memory] in fused.h).

#include <cstddef>
#include <vector>

#include "tandem/core/device.h"
#include "tandem/core/tensor.h"

namespace tandem {

class DeviceScalars {
 public:
  // `count` values on `device`, zero until the first upload. Errors: count 0; a device that does not exist.
  DeviceScalars(Device device, size_t count);
  DeviceScalars(const DeviceScalars&) = delete;
  DeviceScalars& operator=(const DeviceScalars&) = delete;

  // The values: [count], float32, contiguous, on the device, at the same address for the object's life.
  const Tensor& values() const { return values_; }
  // Sets the values. On a GPU: one asynchronous copy from a fresh block of pinned host memory (Tensor::empty_pinned)
  // on the device's compute stream, so the new values are seen by the work issued after this call and not by the
  // work issued before it; the host does not wait, since the pinned allocator hands the block out again only once
  // the copy has run (Note [Pinned block reuse] in core/src/cuda/pinned_allocator.cpp). On a CPU device the values
  // are written at once. Values equal to the last ones uploaded are not copied again (nothing but upload() writes the
  // buffer). Requires: no capture open on the device (DeviceGraph): a captured copy would replay this call's values
  // forever. Errors: another number of values than `count`.
  void upload(const std::vector<float>& values);

 private:
  Tensor values_;
  std::vector<float> uploaded_;  // the values of the last upload (zeros at first)
};

}  // namespace tandem
