#pragma once
// The CUDA side of DeviceScalars (tandem/core/device_scalars.h): pinned host slots, used in turn, each with the
// event of the copy that last read it. Without CUDA, creating one throws.

#include <cstddef>

#include "tandem/core/tensor.h"

namespace tandem::detail {

struct StagedUpload;

// `slots` pinned buffers of `bytes` each, for uploads to CUDA device `device`.
StagedUpload* create_staged_upload(int device, size_t bytes, size_t slots);
void destroy_staged_upload(StagedUpload* upload) noexcept;
// Copies `bytes` bytes from `host` into the next slot (after waiting for the copy that last read it) and from there
// into dst (contiguous, on the upload's device) on that device's compute stream, without waiting for the copy.
void staged_upload(StagedUpload& upload, const void* host, const Tensor& dst);

}  // namespace tandem::detail
