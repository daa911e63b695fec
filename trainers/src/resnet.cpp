#include "tandem/trainers/resnet.h"

#include <utility>

#include "tandem/core/error.h"
#include "tandem/core/ops.h"
#include "tandem/nn/init.h"

namespace tandem::trainers {
namespace {

std::shared_ptr<nn::Conv2d> resnet_conv(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride) {
  auto conv = std::make_shared<nn::Conv2d>(
      in_channels, out_channels, kernel,
      nn::Conv2dOptions{.stride = stride, .padding = kernel / 2, .bias = false});
  nn::init::kaiming_normal_(conv->weight, 0.0, "fan_out", "relu");  // torchvision's ResNet initialization
  return conv;
}

// layerN: `blocks` BasicBlocks, the first of them taking in_channels at `stride`.
std::shared_ptr<nn::Sequential> resnet_stage(int64_t in_channels, int64_t channels, int64_t stride, int blocks) {
  auto stage = std::make_shared<nn::Sequential>();
  for (int b = 0; b < blocks; ++b) {
    stage->push_back(std::make_shared<BasicBlock>(b == 0 ? in_channels : channels, channels, b == 0 ? stride : 1));
  }
  return stage;
}

const ResNetConfig& checked(const ResNetConfig& config) {
  for (const auto& [name, value] : {std::pair{"in_channels", config.in_channels}, std::pair{"classes", config.classes},
                                    std::pair{"width", config.width}}) {
    TANDEM_CHECK(value >= 1, "trainers::ResNet: ", name, " is ", value, " but expected at least 1");
  }
  return config;
}

}  // namespace

BasicBlock::BasicBlock(int64_t in_channels, int64_t channels, int64_t stride)
    : conv1(resnet_conv(in_channels, channels, 3, stride)),
      conv2(resnet_conv(channels, channels, 3, 1)),
      bn1(std::make_shared<nn::BatchNorm2d>(channels)),
      bn2(std::make_shared<nn::BatchNorm2d>(channels)) {
  register_module("conv1", conv1);
  register_module("bn1", bn1);
  register_module("conv2", conv2);
  register_module("bn2", bn2);
  if (stride != 1 || in_channels != channels) {
    downsample = std::make_shared<nn::Sequential>(resnet_conv(in_channels, channels, 1, stride),
                                                  std::make_shared<nn::BatchNorm2d>(channels));
    register_module("downsample", downsample);
  }
}

Tensor BasicBlock::forward(const Tensor& x) {
  const Tensor branch = bn2->forward(conv2->forward(relu(bn1->forward(conv1->forward(x)))));
  return relu(branch + (downsample ? downsample->forward(x) : x));
}

ResNet::ResNet(const ResNetConfig& config)
    : conv1(resnet_conv(checked(config).in_channels, config.width, 3, 1)),
      bn1(std::make_shared<nn::BatchNorm2d>(config.width)),
      layer1(resnet_stage(config.width, config.width, 1, 2)),
      layer2(resnet_stage(config.width, 2 * config.width, 2, 2)),
      layer3(resnet_stage(2 * config.width, 4 * config.width, 2, 2)),
      layer4(resnet_stage(4 * config.width, 8 * config.width, 2, 2)),
      avgpool(std::make_shared<nn::AdaptiveAvgPool2d>(1)),
      fc(std::make_shared<nn::Linear>(8 * config.width, config.classes)) {
  register_module("conv1", conv1);
  register_module("bn1", bn1);
  register_module("layer1", layer1);
  register_module("layer2", layer2);
  register_module("layer3", layer3);
  register_module("layer4", layer4);
  register_module("avgpool", avgpool);
  register_module("fc", fc);
}

Tensor ResNet::forward(const Tensor& images) {
  Tensor x = relu(bn1->forward(conv1->forward(images)));
  x = layer4->forward(layer3->forward(layer2->forward(layer1->forward(x))));
  return fc->forward(avgpool->forward(x).flatten(1));
}

std::shared_ptr<ResNet> make_resnet18(const ResNetConfig& config) { return std::make_shared<ResNet>(config); }

}  // namespace tandem::trainers
