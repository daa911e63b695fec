#pragma once
// Flat buckets for the coalesced comm functions: tensors are grouped in order into buckets of up to `buffer_size`
// bytes (a tensor larger than that gets a bucket of its own), packed into one flat 1-D tensor per bucket, sent with
// one collective, and unpacked.

#include <cstddef>
#include <vector>

#include "tandem/core/tensor.h"

namespace tandem::comm::detail {

struct Bucket {
  size_t begin = 0;  // tensors [begin, end)
  size_t end = 0;
};

std::vector<Bucket> make_buckets(const std::vector<Tensor>& tensors, size_t buffer_size);

// The tensors of `bucket` (all on one device) as one flat 1-D tensor on that device. A bucket of one contiguous
// tensor is a view of that tensor (no copy); otherwise the values are copied into a new tensor.
Tensor pack(const std::vector<Tensor>& tensors, const Bucket& bucket);

// Splits `flat` (a fresh result of a collective, referenced nowhere else) back into tensors shaped like
// like[bucket.begin .. bucket.end). Note [Unpacked tensors own their storage]: the results must alias neither each
// other nor the bucket, so each is cloned out of the flat tensor; a bucket of one tensor is the exception, where
// the result is a view of `flat` itself, which nothing else references, so no copy is needed.
std::vector<Tensor> unpack(const Tensor& flat, const std::vector<Tensor>& like, const Bucket& bucket);

}  // namespace tandem::comm::detail
