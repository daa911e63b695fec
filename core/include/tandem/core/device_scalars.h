#pragma once
// DeviceScalars: a few float32 values in device memory that the host refreshes without waiting for the device, for
// kernels that must read values which change between runs of a captured graph (Note [Hyper-parameters in device
// memory] in fused.h).

#include <cstddef>
#include <memory>
#include <vector>

#include "tandem/core/device.h"
#include "tandem/core/tensor.h"

namespace tandem {

namespace detail {
struct StagedUpload;  // the pinned host slots of a CUDA device's uploads (core/src/staged_upload.h)
}  // namespace detail

class DeviceScalars {
 public:
  // `count` values on `device`, zero until the first upload. Errors: count 0; a device that does not exist.
  DeviceScalars(Device device, size_t count);
  ~DeviceScalars();
  DeviceScalars(const DeviceScalars&) = delete;
  DeviceScalars& operator=(const DeviceScalars&) = delete;

  // The values: [count], float32, contiguous, on the device, at the same address for the object's life.
  const Tensor& values() const { return values_; }
  // Sets the values. On a GPU: one asynchronous copy from pinned host memory on the device's compute stream, so the
  // new values are seen by the work issued after this call and not by the work issued before it; the host does not
  // wait, except when the copy issued kSlots uploads earlier has not run yet (its pinned slot is reused). On a CPU
  // device the values are written at once. Values equal to the last ones uploaded are not copied again (nothing but
  // upload() writes the buffer). Errors: another number of values than `count`.
  void upload(const std::vector<float>& values);

  static constexpr size_t kSlots = 4;

 private:
  Tensor values_;
  std::vector<float> uploaded_;  // the values of the last upload (zeros at first)
  std::unique_ptr<detail::StagedUpload, void (*)(detail::StagedUpload*)> staging_;
};

}  // namespace tandem
