#include "buckets.h"

namespace tandem::comm::detail {

std::vector<Bucket> make_buckets(const std::vector<Tensor>& tensors, size_t buffer_size) {
  std::vector<Bucket> buckets;
  size_t bucket_bytes = 0;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const size_t bytes = static_cast<size_t>(tensors[i].numel()) * element_size(tensors[i].dtype());
    if (buckets.empty() || bucket_bytes + bytes > buffer_size) {
      buckets.push_back({i, i});
      bucket_bytes = 0;
    }
    buckets.back().end = i + 1;
    bucket_bytes += bytes;
  }
  return buckets;
}

}  // namespace tandem::comm::detail
