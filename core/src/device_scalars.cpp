#include "tandem/core/device_scalars.h"

#include <algorithm>

#include "backend.h"
#include "tandem/core/error.h"

namespace tandem {

DeviceScalars::DeviceScalars(Device device, size_t count) {
  TANDEM_CHECK(count > 0, "DeviceScalars: got a count of 0 but expected at least one value");
  values_ = Tensor::zeros({static_cast<int64_t>(count)}, device);
  uploaded_.assign(count, 0.0f);
}

void DeviceScalars::upload(const std::vector<float>& values) {
  TANDEM_CHECK(static_cast<int64_t>(values.size()) == values_.numel(), "DeviceScalars::upload: got ", values.size(),
               " values but expected ", values_.numel());
  if (values == uploaded_) return;
  uploaded_ = values;
  if (values_.device().is_cpu()) {
    std::copy(values.begin(), values.end(), values_.mutable_data());  // CPU work is done when its call returns
    return;
  }
  // The block is new or its last copy has run, so writing it waits for nothing; dropped at the end of this call, it is
  // not handed out again before the copy below has read it (Note [Pinned block reuse]).
  const Tensor staging = Tensor::empty_pinned(values_.shape());
  std::copy(values.begin(), values.end(), staging.mutable_data());
  backend::cuda_copy_from_pinned(staging, values_);
}

}  // namespace tandem
