// nn::conv2d, nn::max_pool2d, nn::avg_pool2d and nn::adaptive_avg_pool2d against PyTorch's own, on the inputs and
// weights that tests/nn/torch_replay/make_conv_replay.py drew and the float32 outputs and gradients PyTorch computed
// for them: convolutions of 1x1, 3x3, 5x5 and rectangular kernels, strides 1, 2, 3 and {2, 1}, explicit, "same" and
// "valid" paddings, dilations 1, 2 and {2, 1}, groups 1, 2 and depthwise, with and without bias, batched and not;
// max and average pooling with padding, dilation, ceil_mode, count_include_pad and tied maxima; adaptive average
// pooling down, to 1x1 and up. Within 1e-5 (relative to the largest value, expect_near_relative) on every device,
// with TF32 off so that the products are float32 as PyTorch's are.
#include "nn/torch_replay/replay_cases.h"
#include "support/test_support.h"
#include "tandem/nn/conv.h"
#include "tandem/nn/pooling.h"

namespace tandem {
namespace {

// Per case: parts input, out, grad_out, grad_input (and weight, bias, grad_weight, grad_bias for conv2d); settings
// "op" and the op's arguments.
const std::vector<testing::ReplayCase>& conv_replay_cases() {
  static const std::vector<testing::ReplayCase> cases =
      testing::load_replay_cases(TANDEM_SOURCE_DIR "/tests/nn/torch_replay/conv_replay.safetensors");
  return cases;
}

nn::Size2d replay_size(const nlohmann::json& pair) { return {pair.at(0).get<int64_t>(), pair.at(1).get<int64_t>()}; }

nn::Conv2dPadding replay_conv_padding(const nlohmann::json& padding) {
  if (padding.is_string()) return nn::Conv2dPadding(std::string_view(padding.get_ref<const std::string&>()));
  return {padding.at(0).get<int64_t>(), padding.at(1).get<int64_t>()};
}

// The case's op on `input` (and `weight`, `bias` for conv2d), with the arguments the file gives it.
Tensor run_replayed_op(const nlohmann::json& s, const Tensor& input, const Tensor& weight, const Tensor& bias) {
  const std::string& op = s.at("op").get_ref<const std::string&>();
  if (op == "conv2d") {
    return nn::conv2d(input, weight, bias,
                      {.stride = replay_size(s.at("stride")),
                       .padding = replay_conv_padding(s.at("padding")),
                       .dilation = replay_size(s.at("dilation")),
                       .groups = s.at("groups").get<int64_t>()});
  }
  if (op == "max_pool2d") {
    return nn::max_pool2d(input, replay_size(s.at("kernel")), replay_size(s.at("stride")), replay_size(s.at("padding")),
                          replay_size(s.at("dilation")), s.value("ceil_mode", false));
  }
  if (op == "avg_pool2d") {
    return nn::avg_pool2d(input, replay_size(s.at("kernel")), replay_size(s.at("stride")), replay_size(s.at("padding")),
                          s.value("ceil_mode", false), s.value("count_include_pad", true));
  }
  EXPECT_EQ(op, "adaptive_avg_pool2d");
  return nn::adaptive_avg_pool2d(input, replay_size(s.at("output_size")));
}

class ConvTorchReplay : public testing::EveryDevice {
 protected:
  // Runs every case of `op` (there must be `count`) and compares its output and gradients with PyTorch's.
  void expect_pytorchs_results(const std::string& op, size_t count) {
    const testing::ScopedSwitch<allow_tf32, set_allow_tf32> float32_products(false);
    size_t seen = 0;
    for (const testing::ReplayCase& c : conv_replay_cases()) {
      if (c.settings.at("op") != op) continue;
      ++seen;
      SCOPED_TRACE(c.name);
      // Copies: the file's tensors are shared by every test, and a leaf given requires_grad keeps its .grad.
      const auto part = [&](const std::string& name) {
        return c.parts.contains(name) ? c.parts.at(name).to(device()).clone().set_requires_grad(true) : Tensor();
      };
      const Tensor input = part("input");
      const Tensor weight = part("weight");
      const Tensor bias = part("bias");
      const Tensor out = run_replayed_op(c.settings, input, weight, bias);
      sum(out * c.parts.at("grad_out").to(device())).backward();
      testing::expect_near_relative(out, c.parts.at("out"), 1e-5, "output");
      testing::expect_near_relative(input.grad(), c.parts.at("grad_input"), 1e-5, "input gradient");
      if (weight.defined()) {
        testing::expect_near_relative(weight.grad(), c.parts.at("grad_weight"), 1e-5, "weight gradient");
      }
      if (bias.defined()) testing::expect_near_relative(bias.grad(), c.parts.at("grad_bias"), 1e-5, "bias gradient");
    }
    EXPECT_EQ(seen, count) << op << " cases in the replay file";
  }
};

TEST_P(ConvTorchReplay, Conv2dGivesPyTorchsOutputAndGradients) { expect_pytorchs_results("conv2d", 16); }

TEST_P(ConvTorchReplay, MaxPool2dGivesPyTorchsOutputAndGradient) { expect_pytorchs_results("max_pool2d", 7); }

TEST_P(ConvTorchReplay, AvgPool2dGivesPyTorchsOutputAndGradient) { expect_pytorchs_results("avg_pool2d", 6); }

TEST_P(ConvTorchReplay, AdaptiveAvgPool2dGivesPyTorchsOutputAndGradient) {
  expect_pytorchs_results("adaptive_avg_pool2d", 5);
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(ConvTorchReplay);

}  // namespace
}  // namespace tandem
