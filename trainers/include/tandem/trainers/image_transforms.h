#pragma once
// Transforms of a training loader's examples (DataLoaderOptions::transform, TrainerOptions::transform), applied by
// whoever makes a batch (a loader's worker, or batch() itself) to each example of it, with randomness derived only
// from (seed, epoch, example index): a run repeats exactly for any number of workers, devices and processes, since
// each example is transformed alike wherever it lands (Note [Transforms keyed by example]).
//
//   trainers::ImageTransforms augment({.image_shape = {1, 8, 8}, .crop_padding = 1, .seed = 7});
//   trainers::DataLoader loader(data, {.batch_size = 64, .shuffle = true,
//                                      .transform = std::make_shared<trainers::ImageTransforms>(augment)});

#include <cstdint>
#include <vector>

#include "tandem/core/shape.h"
#include "tandem/core/tensor.h"

namespace tandem::trainers {

class BatchTransform {
 public:
  virtual ~BatchTransform() = default;
  // The batch `data` ([n, ...], example i of it the data set's example indices[i]) transformed in epoch `epoch` (from
  // 0), of the same shape. Called from several threads at once: it must not change shared state, and each example's
  // result must depend only on that example's data, its index and the epoch.
  virtual Tensor apply(const Tensor& data, const std::vector<int64_t>& indices, int64_t epoch) const = 0;
};

struct ImageTransformOptions {
  Shape image_shape;             // {C, H, W}: each example is one image, [C, H, W] or its C * H * W pixels as a row
  int64_t crop_padding = 0;      // torchvision's RandomCrop((H, W), padding): zeros around, then a random H x W window
  bool horizontal_flip = false;  // torchvision's RandomHorizontalFlip(0.5): the columns reversed, with probability 1/2
  // torchvision's Normalize(mean, std): (x - mean[c]) / std[c] per channel, after the crop and the flip. Empty: none.
  std::vector<double> mean;
  std::vector<double> std;
  uint64_t seed = 0;  // of the crops and flips
};

// Random crop with zero padding, then horizontal flip, then per-channel normalization, as a torchvision
// Compose([RandomCrop, RandomHorizontalFlip, Normalize]) in that order.
class ImageTransforms : public BatchTransform {
 public:
  // Errors: an image_shape that is not three sizes of at least 1; crop_padding < 0 or above max(H, W); mean and std
  // not both empty or both of C values; a std that is not positive, or a mean or std that is not finite.
  explicit ImageTransforms(ImageTransformOptions options);
  // Errors: data that is not float32, whose examples do not hold C * H * W values, or whose indices do not number
  // its rows.
  Tensor apply(const Tensor& data, const std::vector<int64_t>& indices, int64_t epoch) const override;
  const ImageTransformOptions& options() const { return options_; }

 private:
  ImageTransformOptions options_;
};

}  // namespace tandem::trainers
