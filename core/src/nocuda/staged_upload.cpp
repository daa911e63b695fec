// Without CUDA no DeviceScalars lives on a GPU (creating its tensor has failed already).

#include "staged_upload.h"

#include "tandem/core/error.h"

namespace tandem::detail {

StagedUpload* create_staged_upload(int, size_t, size_t) {
  TANDEM_FAIL("DeviceScalars: tandem was built without CUDA (configure with -DTANDEM_CUDA=ON)");
}

void destroy_staged_upload(StagedUpload*) noexcept {}

void staged_upload(StagedUpload&, const void*, const Tensor&) {
  TANDEM_FAIL("DeviceScalars::upload: tandem was built without CUDA (configure with -DTANDEM_CUDA=ON)");
}

}  // namespace tandem::detail
