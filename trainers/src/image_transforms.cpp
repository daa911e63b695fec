#include "tandem/trainers/image_transforms.h"

#include <algorithm>
#include <cmath>

#include "tandem/core/error.h"
#include "tandem/core/splitmix64.h"

namespace tandem::trainers {
namespace {

// Note [Transforms keyed by example]: each example's draws are splitmix64 values of a state that mixes the seed, the
// epoch and the example's index in its data set, never a generator shared by the batch: the crop and flip of an
// example do not depend on which batch, worker, device or process makes it, or on what was drawn before.
struct ExampleDraws {
  uint64_t key;
  uint64_t draw(uint64_t n) const { return splitmix64(key, n); }
};

ExampleDraws draws_of(uint64_t seed, int64_t epoch, int64_t index) {
  const uint64_t mixed = splitmix64_mix(seed ^ splitmix64_mix(static_cast<uint64_t>(epoch) + kSplitMix64Step));
  return {splitmix64_mix(mixed ^ (static_cast<uint64_t>(index) * kSplitMix64Step))};
}

void check_image_shape(const Shape& shape, const char* caller) {
  TANDEM_CHECK(shape.size() == 3 && std::all_of(shape.begin(), shape.end(), [](int64_t s) { return s >= 1; }), caller,
               ": image_shape is ", tandem::to_string(shape), " but expected {C, H, W}, each at least 1");
  checked_numel(shape, caller);
}

}  // namespace

ImageTransforms::ImageTransforms(ImageTransformOptions options) : options_(std::move(options)) {
  const Shape& shape = options_.image_shape;
  check_image_shape(shape, "ImageTransforms");
  TANDEM_CHECK(options_.crop_padding >= 0 && options_.crop_padding <= std::max(shape[1], shape[2]),
               "ImageTransforms: crop_padding is ", options_.crop_padding, " but expected 0 to ",
               std::max(shape[1], shape[2]));
  const auto channels = static_cast<size_t>(shape[0]);
  const bool none = options_.mean.empty() && options_.std.empty();
  TANDEM_CHECK(none || (options_.mean.size() == channels && options_.std.size() == channels),
               "ImageTransforms: mean has ", options_.mean.size(), " values and std ", options_.std.size(),
               " but expected both empty or both ", channels, " (one per channel)");
  for (size_t c = 0; c < options_.std.size(); ++c) {
    TANDEM_CHECK(std::isfinite(options_.mean[c]) && std::isfinite(options_.std[c]) && options_.std[c] > 0.0,
                 "ImageTransforms: channel ", c, " has mean ", options_.mean[c], " and std ", options_.std[c],
                 " but expected finite values and a positive std");
  }
}

Tensor ImageTransforms::apply(const Tensor& data, const std::vector<int64_t>& indices, int64_t epoch) const {
  const Shape& shape = options_.image_shape;
  const int64_t channels = shape[0], height = shape[1], width = shape[2];
  const int64_t pixels = channels * height * width;
  TANDEM_CHECK(data.defined() && data.dtype() == DType::Float32 && data.dim() >= 1,
               "ImageTransforms: expected a float32 batch [n, ...]");
  const int64_t rows = data.size(0);
  TANDEM_CHECK(rows == static_cast<int64_t>(indices.size()), "ImageTransforms: a batch of ", rows, " examples but ",
               indices.size(), " indices");
  TANDEM_CHECK(data.numel() == rows * pixels, "ImageTransforms: a batch of shape ", tandem::to_string(data.shape()),
               " but expected ", pixels, " values per example (image_shape ", tandem::to_string(shape), ")");
  const std::vector<float> in = data.to_vector();
  std::vector<float> out(in.size());
  const int64_t pad = options_.crop_padding;
  const bool normalize = !options_.mean.empty();
  for (int64_t r = 0; r < rows; ++r) {
    const ExampleDraws draws = draws_of(options_.seed, epoch, indices[static_cast<size_t>(r)]);
    // The window's top-left corner in the padded image, and whether to flip.
    const auto top = static_cast<int64_t>(pad == 0 ? 0 : draws.draw(0) % static_cast<uint64_t>(2 * pad + 1));
    const auto left = static_cast<int64_t>(pad == 0 ? 0 : draws.draw(1) % static_cast<uint64_t>(2 * pad + 1));
    const bool flip = options_.horizontal_flip && (draws.draw(2) & 1u) != 0;
    const float* image = in.data() + r * pixels;
    float* result = out.data() + r * pixels;
    for (int64_t c = 0; c < channels; ++c) {
      const double mean = normalize ? options_.mean[static_cast<size_t>(c)] : 0.0;
      const double std = normalize ? options_.std[static_cast<size_t>(c)] : 1.0;
      for (int64_t y = 0; y < height; ++y) {
        for (int64_t x = 0; x < width; ++x) {
          const int64_t source_y = y + top - pad;
          const int64_t cropped_x = flip ? width - 1 - x : x;  // the crop's column, read reversed when flipped
          const int64_t source_x = cropped_x + left - pad;
          const bool inside = source_y >= 0 && source_y < height && source_x >= 0 && source_x < width;
          const double value = inside ? image[(c * height + source_y) * width + source_x] : 0.0;
          result[(c * height + y) * width + x] = static_cast<float>(normalize ? (value - mean) / std : value);
        }
      }
    }
  }
  return Tensor::from_vector(out, data.shape());
}

}  // namespace tandem::trainers
