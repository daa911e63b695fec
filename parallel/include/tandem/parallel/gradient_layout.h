#pragma once
// GradientLayout: where each parameter's gradient lives in a flat gradient buffer, and how that buffer is cut into
// buckets, each summed by one collective. Every replica (and, later, every process) computes the same layout from
// the same parameter list, so their buffers and buckets match element for element.
//
// Note [Flat gradient buffers]: each replica's parameter gradients are views into one contiguous buffer per device,
// laid out in parameters() order, installed as the parameters' .grad before backward. Backward accumulates into an
// existing .grad in place (Note [Gradient buffers] in core), so after backward each buffer holds that replica's
// gradients, and an all_reduce over narrow views of the buffers (one per bucket of about `bucket_size` bytes) sums
// them on every device at once. Buckets are formed from the last parameter backwards, the order in which backward
// produces the gradients, so the first bucket is the first to be complete.
//
// Note [Padded buckets]: a reduce-scatter (DistributedOptions::zero_stage >= 1) cuts every bucket into one equal chunk
// per device of the world, so with pad_to = W each bucket's length is rounded up to a multiple of W by zeros placed
// after its last parameter's gradient (at the bucket's end in buffer order). The padding belongs to no parameter:
// nothing writes it, so it stays zero, sums to zero and adds nothing to a norm. Every later bucket in buffer order
// (a lower bucket index) starts that much further on. With pad_to = 1 the layout is the unpadded one.

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "tandem/core/tensor.h"

namespace tandem::parallel {

class GradientLayout {
 public:
  struct Bucket {
    int64_t start;  // in elements of the flat buffer
    int64_t length;
    size_t parameters;  // how many parameters' gradients it holds
  };

  // Every parameter that requires grad gets a place, in the given order; the others get none. Buckets hold up to
  // bucket_size bytes of gradients (one larger than that gets a bucket of its own).
  // Errors: bucket_size 0; an undefined parameter; one tensor listed twice (a shared parameter has one gradient and
  // one place: list it once, as nn::Module::parameters() does, Note [Shared parameters] in nn/module.h).
  // pad_to: every bucket's length is a multiple of it (Note [Padded buckets]); errors: also pad_to 0.
  GradientLayout(const std::vector<std::pair<std::string, Tensor>>& parameters, size_t bucket_size, size_t pad_to = 1);

  size_t parameter_count() const { return places_.size(); }
  int64_t numel() const { return numel_; }  // elements of one flat buffer
  // From the last parameters to the first: bucket 0 holds the gradients backward produces first.
  const std::vector<Bucket>& buckets() const { return buckets_; }

  // Requires parameter < parameter_count() (these are read for every gradient of a step):
  const std::string& name(size_t parameter) const { return places_[parameter].name; }
  bool has_place(size_t parameter) const { return places_[parameter].offset >= 0; }
  // Where the parameter's gradient starts in the flat buffer, in elements; requires has_place(parameter).
  int64_t offset(size_t parameter) const { return places_[parameter].offset; }
  size_t bucket_of(size_t parameter) const { return places_[parameter].bucket; }  // requires has_place(parameter)
  // The parameters whose gradients lie in `bucket`, in increasing order; requires bucket < buckets().size().
  const std::vector<size_t>& bucket_parameters(size_t bucket) const { return bucket_parameters_[bucket]; }

  // Views into `buffer`, a flat buffer of this layout (1-D, numel() elements):
  // the gradient of `parameter`, of the parameter's shape. Errors: no such parameter, or one without a place.
  Tensor gradient_view(const Tensor& buffer, size_t parameter) const;
  // the slice of `bucket`. Errors: no such bucket.
  Tensor bucket_view(const Tensor& buffer, size_t bucket) const;

 private:
  struct Place {
    std::string name;
    Shape shape;
    int64_t offset;  // in elements; -1: no place (the parameter does not require grad)
    size_t bucket;
  };
  void pad_buckets(int64_t pad_to);
  void check_buffer(const Tensor& buffer, const char* caller) const;

  std::vector<Place> places_;
  int64_t numel_ = 0;
  std::vector<Bucket> buckets_;
  std::vector<std::vector<size_t>> bucket_parameters_;  // [bucket]
};

}  // namespace tandem::parallel
