// Parity with PyTorch: trainers::make_resnet18 loads the state_dict (parameters and batch-norm buffers) of the same
// network built in PyTorch (tests/trainers/torch_replay/make_resnet_replay.py wrote the weights and PyTorch's float32
// results on one batch) and gives, on the CPU and on the GPU:
//   - in eval mode, the same logits and loss (1e-5 relative);
//   - in training mode, the same logits and loss, every parameter's gradient (within 1e-4 of its tensor's largest
//     magnitude) and the running statistics after the forward (1e-5).
// The committed files have width 4; TANDEM_RESNET_REPLAY_DIR names a directory the script wrote with --width 64 (the
// full ResNet-18, 44 MB) to check that too.
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>

#include "support/test_support.h"
#include "tandem/core/grad_mode.h"
#include "tandem/nn/loss_functions.h"
#include "tandem/nn/serialize.h"
#include "tandem/trainers/resnet.h"

namespace tandem::trainers {
namespace {

struct ResNetReplay {
  std::string dir;
  ResNetConfig config;
  std::map<std::string, Tensor> tensors;  // by name: images, labels, eval_*, train_*, grad.<p>, after.<buffer>

  const Tensor& at(const std::string& name) const { return tensors.at(name); }
};

ResNetReplay read_resnet_replay(const std::string& dir) {
  const TensorFile expected = load_tensors(dir + "/resnet_expected.safetensors");
  ResNetReplay r{.dir = dir};
  r.config.width = nlohmann::json::parse(expected.metadata.at("width")).get<int64_t>();
  r.config.classes = nlohmann::json::parse(expected.metadata.at("classes")).get<int64_t>();
  for (const auto& [name, tensor] : expected.tensors) r.tensors.emplace(name, tensor);
  return r;
}

std::vector<std::string> resnet_replay_dirs() {
  std::vector<std::string> dirs = {TANDEM_SOURCE_DIR "/tests/trainers/torch_replay"};
  if (const char* full = std::getenv("TANDEM_RESNET_REPLAY_DIR"); full != nullptr && *full != '\0') {
    dirs.emplace_back(full);
  }
  return dirs;
}

class ResNetTorchReplay : public testing::EveryDevice {
 protected:
  std::shared_ptr<ResNet> loaded(const ResNetReplay& r) {
    const auto net = make_resnet18(r.config);
    load(*net, r.dir + "/resnet_weights.safetensors");
    net->to(device());
    return net;
  }
};

TEST_P(ResNetTorchReplay, EvalModeGivesPyTorchsLogitsAndLoss) {
  for (const std::string& dir : resnet_replay_dirs()) {
    SCOPED_TRACE(dir);
    const ResNetReplay r = read_resnet_replay(dir);
    const auto net = loaded(r);
    net->eval();
    NoGradGuard no_grad;
    const Tensor logits = net->forward(r.at("images").to(device()));
    EXPECT_LE(testing::scaled_deviation(logits, r.at("eval_logits")), 1e-5);
    const double loss = nn::cross_entropy(logits, r.at("labels").to(device())).item<double>();
    const double expected = r.at("eval_loss").item<double>();
    EXPECT_NEAR(loss, expected, 1e-5 * expected);
  }
}

TEST_P(ResNetTorchReplay, TrainingModeGivesPyTorchsLossGradientsAndRunningStatistics) {
  for (const std::string& dir : resnet_replay_dirs()) {
    SCOPED_TRACE(dir);
    const ResNetReplay r = read_resnet_replay(dir);
    const auto net = loaded(r);
    const Tensor logits = net->forward(r.at("images").to(device()));
    const Tensor loss = nn::cross_entropy(logits, r.at("labels").to(device()));
    loss.backward();

    EXPECT_LE(testing::scaled_deviation(logits, r.at("train_logits")), 1e-5);
    const double expected = r.at("train_loss").item<double>();
    EXPECT_NEAR(loss.item<double>(), expected, 1e-5 * expected);
    size_t gradients = 0, buffers = 0;
    for (const auto& [name, parameter] : net->named_parameters()) {
      ASSERT_TRUE(parameter.grad().defined()) << name;
      EXPECT_LE(testing::scaled_deviation(parameter.grad(), r.at("grad." + name)), 1e-4) << name;
      ++gradients;
    }
    for (const auto& [name, buffer] : net->named_buffers()) {
      EXPECT_LE(testing::scaled_deviation(buffer.to(DType::Float32), r.at("after." + name).to(DType::Float32)), 1e-5)
          << name;
      ++buffers;
    }
    // 20 convolutions and fc's two (the stem, 16 in the blocks, 3 shortcuts: 20 + 2), 2 per batch norm (20 of them).
    EXPECT_EQ(gradients, 62u);
    EXPECT_EQ(buffers, 60u);  // running_mean, running_var and num_batches_tracked of each batch norm
  }
}

TEST(ResNet, NamesAndSizesAreTorchvisions) {
  const auto net = make_resnet18({.classes = 100});
  const auto named = net->named_parameters();
  int64_t count = 0;
  for (const auto& [name, parameter] : named) count += parameter.numel();
  EXPECT_EQ(count, 11220132);  // torchvision's resnet18 with the 3x3 stem and 100 classes
  const std::map<std::string, Shape> expected = {{"conv1.weight", {64, 3, 3, 3}},
                                                 {"layer2.0.downsample.0.weight", {128, 64, 1, 1}},
                                                 {"layer2.0.downsample.1.bias", {128}},
                                                 {"layer4.1.conv2.weight", {512, 512, 3, 3}},
                                                 {"fc.weight", {100, 512}}};
  for (const auto& entry : expected) {
    const auto it = std::find_if(named.begin(), named.end(), [&](const auto& p) { return p.first == entry.first; });
    ASSERT_NE(it, named.end()) << entry.first;
    EXPECT_EQ(it->second.shape(), entry.second) << entry.first;
  }
  EXPECT_THROW(make_resnet18({.classes = 0}), Error);
  EXPECT_THROW(make_resnet18({.width = 0}), Error);
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(ResNetTorchReplay);

}  // namespace
}  // namespace tandem::trainers
