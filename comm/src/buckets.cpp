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

Tensor pack(const std::vector<Tensor>& tensors, const Bucket& bucket) {
  const Tensor& first = tensors[bucket.begin];
  if (bucket.end - bucket.begin == 1 && first.is_contiguous()) return first.view({first.numel()});
  int64_t total = 0;
  for (size_t i = bucket.begin; i < bucket.end; ++i) total += tensors[i].numel();
  Tensor flat = Tensor::empty({total}, first.device());
  int64_t offset = 0;
  for (size_t i = bucket.begin; i < bucket.end; ++i) {
    const Tensor& t = tensors[i];
    if (t.numel() > 0) flat.narrow(0, offset, t.numel()).view(t.shape()).copy_(t);
    offset += t.numel();
  }
  return flat;
}

std::vector<Tensor> unpack(const Tensor& flat, const std::vector<Tensor>& like, const Bucket& bucket) {
  std::vector<Tensor> results;
  results.reserve(bucket.end - bucket.begin);
  if (bucket.end - bucket.begin == 1) {
    results.push_back(flat.view(like[bucket.begin].shape()));
    return results;
  }
  int64_t offset = 0;
  for (size_t i = bucket.begin; i < bucket.end; ++i) {
    const int64_t n = like[i].numel();
    results.push_back(flat.narrow(0, offset, n).view(like[i].shape()).clone());
    offset += n;
  }
  return results;
}

}  // namespace tandem::comm::detail
