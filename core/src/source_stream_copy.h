#pragma once
// The CUDA side of copy_on_source_stream (tandem/core/source_stream_copy.h) and of DeviceGraph::replay's feeds.

#include "tandem/core/tensor.h"

namespace tandem::detail {

// One asynchronous copy of src into dst (contiguous, of one size, on GPUs) on src's compute stream, with no event.
void cuda_copy_on_source_stream(const Tensor& src, const Tensor& dst);
// Makes dst's GPU's compute stream wait for all work issued so far on src's GPU's compute stream.
void cuda_order_after_source(const Tensor& src, const Tensor& dst);

}  // namespace tandem::detail
