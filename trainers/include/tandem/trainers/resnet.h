#pragma once
// ResNet-18 for small images: torchvision's resnet18 structure and module names with the CIFAR stem (a 3x3, stride 1
// convolution and no max pool, as He et al. train on 32 x 32 images), so that a PyTorch state_dict of the same
// network saved as safetensors loads (nn::load_safetensors):
//   conv1, bn1                       Conv2d(in_channels, width, 3, padding 1, no bias), BatchNorm2d, ReLU
//   layer1 .. layer4                 two BasicBlocks each, widths 64, 128, 256, 512 (config.width times 1, 2, 4, 8);
//                                    the first block of layer2..4
//                                    halves the image (stride 2) and carries `downsample` (0: 1x1 conv, 1: BatchNorm2d)
//   avgpool, fc                      AdaptiveAvgPool2d(1), Linear(8 width, classes)
// A BasicBlock is relu(bn2(conv2(relu(bn1(conv1(x))))) + shortcut(x)), with 3x3 convolutions. Initialization as
// torchvision's: convolutions kaiming_normal_(fan_out, relu), batch norms ones and zeros, fc as nn::Linear.
//
//   auto net = trainers::make_resnet18({.classes = 10});
//   Tensor logits = net->forward(images);   // [N, 3, 32, 32] -> [N, 10]

#include <cstdint>
#include <memory>

#include "tandem/nn/conv.h"
#include "tandem/nn/linear.h"
#include "tandem/nn/normalization.h"
#include "tandem/nn/pooling.h"
#include "tandem/nn/sequential.h"

namespace tandem::trainers {

struct ResNetConfig {
  int64_t in_channels = 3;
  int64_t classes = 10;
  int64_t width = 64;  // the stem's and layer1's channels; layer2..4 have 2, 4 and 8 times as many
};

class BasicBlock : public nn::Cloneable<BasicBlock> {
 public:
  // stride 2 (or in_channels != channels) adds the projection shortcut `downsample`.
  BasicBlock(int64_t in_channels, int64_t channels, int64_t stride);
  Tensor forward(const Tensor& x) override;

  std::shared_ptr<nn::Conv2d> conv1, conv2;
  std::shared_ptr<nn::BatchNorm2d> bn1, bn2;
  std::shared_ptr<nn::Sequential> downsample;  // null for the identity shortcut
};

class ResNet : public nn::Cloneable<ResNet> {
 public:
  explicit ResNet(const ResNetConfig& config);
  // [N, in_channels, H, W] -> [N, classes]. Errors: the layers' own (a wrong channel count names nn::conv2d).
  Tensor forward(const Tensor& images) override;

  std::shared_ptr<nn::Conv2d> conv1;
  std::shared_ptr<nn::BatchNorm2d> bn1;
  std::shared_ptr<nn::Sequential> layer1, layer2, layer3, layer4;
  std::shared_ptr<nn::AdaptiveAvgPool2d> avgpool;
  std::shared_ptr<nn::Linear> fc;
};

// Errors: in_channels, classes or width below 1 (naming trainers::ResNet).
std::shared_ptr<ResNet> make_resnet18(const ResNetConfig& config = {});

}  // namespace tandem::trainers
