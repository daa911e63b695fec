#include "tandem/core/device_scalars.h"

#include <algorithm>

#include "staged_upload.h"
#include "tandem/core/error.h"

namespace tandem {

DeviceScalars::DeviceScalars(Device device, size_t count) : staging_(nullptr, detail::destroy_staged_upload) {
  TANDEM_CHECK(count > 0, "DeviceScalars: got a count of 0 but expected at least one value");
  values_ = Tensor::zeros({static_cast<int64_t>(count)}, device);
  uploaded_.assign(count, 0.0f);
  if (device.is_cuda()) {
    staging_.reset(detail::create_staged_upload(device.index(), count * sizeof(float), kSlots));
  }
}

DeviceScalars::~DeviceScalars() = default;

void DeviceScalars::upload(const std::vector<float>& values) {
  TANDEM_CHECK(static_cast<int64_t>(values.size()) == values_.numel(), "DeviceScalars::upload: got ", values.size(),
               " values but expected ", values_.numel());
  if (values == uploaded_) return;
  uploaded_ = values;
  if (staging_ == nullptr) {
    std::copy(values.begin(), values.end(), values_.mutable_data());  // CPU work is done when its call returns
  } else {
    detail::staged_upload(*staging_, values.data(), values_);
  }
}

}  // namespace tandem
