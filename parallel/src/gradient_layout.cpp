#include "tandem/parallel/gradient_layout.h"

#include <limits>
#include <unordered_map>

#include "tandem/core/error.h"
#include "tandem/core/shape.h"

namespace tandem::parallel {

namespace {
constexpr const char* kGradientLayout = "parallel::GradientLayout";
constexpr size_t kNoBucket = std::numeric_limits<size_t>::max();
}  // namespace

GradientLayout::GradientLayout(const std::vector<std::pair<std::string, Tensor>>& parameters, size_t bucket_size,
                               size_t pad_to) {
  TANDEM_CHECK(bucket_size > 0, kGradientLayout, ": bucket_size is 0 but expected > 0");
  TANDEM_CHECK(pad_to > 0, kGradientLayout, ": pad_to is 0 but expected > 0");
  std::unordered_map<const TensorImpl*, const std::string*> listed;
  for (const auto& [name, parameter] : parameters) {
    TANDEM_CHECK(parameter.defined(), kGradientLayout, ": parameter '", name, "' is undefined");
    const auto [first, fresh] = listed.try_emplace(parameter.impl(), &name);
    TANDEM_CHECK(fresh, kGradientLayout, ": parameters '", *first->second, "' and '", name,
                 "' are one tensor, but each parameter must be listed once");
    const bool placed = parameter.requires_grad();
    places_.push_back({name, parameter.shape(), placed ? numel_ : -1, kNoBucket});
    if (placed) numel_ += parameter.numel();
  }
  // The buckets, from the last parameter backwards (Note [Flat gradient buffers]); each is a contiguous slice.
  for (size_t i = places_.size(); i-- > 0;) {
    Place& place = places_[i];
    if (place.offset < 0) continue;
    const Tensor& parameter = parameters[i].second;
    const int64_t numel = parameter.numel();
    const auto max_elements = static_cast<int64_t>(bucket_size / element_size(parameter.dtype()));
    if (buckets_.empty() || (buckets_.back().length > 0 && buckets_.back().length + numel > max_elements))
      buckets_.push_back({place.offset + numel, 0, 0});
    Bucket& bucket = buckets_.back();
    bucket.start = place.offset;
    bucket.length += numel;
    ++bucket.parameters;
    place.bucket = buckets_.size() - 1;
  }
  if (pad_to > 1) pad_buckets(static_cast<int64_t>(pad_to));
  bucket_parameters_.resize(buckets_.size());
  for (size_t i = 0; i < places_.size(); ++i) {
    if (places_[i].offset >= 0) bucket_parameters_[places_[i].bucket].push_back(i);
  }
}

// Note [Padded buckets] in gradient_layout.h: in buffer order (the last bucket first), each bucket moves by the padding
// of the buckets before it and grows by its own.
void GradientLayout::pad_buckets(int64_t pad_to) {
  std::vector<int64_t> shift(buckets_.size(), 0);
  int64_t total = 0;
  for (size_t b = buckets_.size(); b-- > 0;) {
    Bucket& bucket = buckets_[b];
    shift[b] = total;
    bucket.start += total;
    const int64_t padding = (pad_to - bucket.length % pad_to) % pad_to;
    bucket.length += padding;
    total += padding;
  }
  for (Place& place : places_) {
    if (place.offset >= 0) place.offset += shift[place.bucket];
  }
  numel_ += total;
}

void GradientLayout::check_buffer(const Tensor& buffer, const char* caller) const {
  TANDEM_CHECK(buffer.defined() && buffer.dim() == 1 && buffer.numel() == numel_, kGradientLayout, "::", caller,
               ": the buffer has shape ", buffer.defined() ? to_string(buffer.shape()) : "(undefined)",
               " but expected [", numel_, "]");
}

Tensor GradientLayout::gradient_view(const Tensor& buffer, size_t parameter) const {
  TANDEM_CHECK(parameter < places_.size(), kGradientLayout, "::gradient_view: parameter ", parameter, " but there are ",
               places_.size());
  const Place& place = places_[parameter];
  TANDEM_CHECK(place.offset >= 0, kGradientLayout, "::gradient_view: parameter '", place.name,
               "' has no place (it does not require grad)");
  check_buffer(buffer, "gradient_view");
  return buffer.narrow(0, place.offset, numel_of(place.shape)).view(place.shape);
}

Tensor GradientLayout::bucket_view(const Tensor& buffer, size_t bucket) const {
  TANDEM_CHECK(bucket < buckets_.size(), kGradientLayout, "::bucket_view: bucket ", bucket, " but there are ",
               buckets_.size());
  check_buffer(buffer, "bucket_view");
  return buffer.narrow(0, buckets_[bucket].start, buckets_[bucket].length);
}

}  // namespace tandem::parallel
