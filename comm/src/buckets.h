#pragma once
// Buckets for the coalesced comm functions: tensors are grouped in order into buckets of up to `buffer_size` bytes
// (a tensor larger than that gets a bucket of its own), and each bucket is sent with one collective over its
// tensors (comm_backend.h).

#include <cstddef>
#include <vector>

#include "tandem/core/tensor.h"

namespace tandem::comm::detail {

struct Bucket {
  size_t begin = 0;  // tensors [begin, end)
  size_t end = 0;
};

std::vector<Bucket> make_buckets(const std::vector<Tensor>& tensors, size_t buffer_size);

}  // namespace tandem::comm::detail
