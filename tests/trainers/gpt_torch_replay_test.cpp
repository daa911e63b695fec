// Parity with PyTorch: trainers::make_gpt loads the weights of the same GPT built in PyTorch
// (tests/trainers/torch_replay/make_gpt_replay.py wrote both files: the weights, and PyTorch's float32 loss and
// gradients on one batch) and gives the same loss (1e-5 relative) and gradients (each within 1e-4 of the largest
// magnitude of its tensor), on the CPU and on the GPU, through the fused attention and through the reference path.
#include <algorithm>
#include <cmath>
#include <map>
#include <nlohmann/json.hpp>

#include "support/test_support.h"
#include "tandem/nn/loss_functions.h"
#include "tandem/nn/serialize.h"
#include "tandem/trainers/gpt.h"

namespace tandem::trainers {
namespace {

const std::string kReplayDir = TANDEM_SOURCE_DIR "/tests/trainers/torch_replay/";

struct Replay {
  GPTConfig config;
  Tensor tokens, targets;
  double loss = 0.0;
  std::map<std::string, Tensor> gradients;  // by parameter name
};

const Replay& replay() {
  static const Replay file = [] {
    const TensorFile expected = load_tensors(kReplayDir + "gpt_expected.safetensors");
    const auto setting = [&](const std::string& key) { return nlohmann::json::parse(expected.metadata.at(key)); };
    Replay r;
    r.config = {.vocab_size = setting("vocab_size"), .block_size = setting("block_size"),
                .n_layer = setting("n_layer"), .n_head = setting("n_head"), .n_embd = setting("n_embd"),
                .bias = setting("bias")};
    for (const auto& [name, tensor] : expected.tensors) {
      if (name == "tokens") r.tokens = tensor;
      if (name == "targets") r.targets = tensor;
      if (name == "loss") r.loss = tensor.item<double>();
      if (name.starts_with("grad.")) r.gradients.emplace(name.substr(5), tensor);
    }
    return r;
  }();
  return file;
}

class GptTorchReplay : public testing::EveryDevice {
 protected:
  void expect_pytorchs_loss_and_gradients() {
    const Replay& r = replay();
    const auto gpt = make_gpt(r.config);
    load(*gpt, kReplayDir + "gpt_weights.safetensors");
    gpt->to(device());
    const Tensor logits = gpt->forward(r.tokens.to(device()));
    const Tensor loss = nn::cross_entropy(logits.reshape({-1, r.config.vocab_size}), r.targets.to(device()).reshape({-1}));
    loss.backward();

    EXPECT_NEAR(loss.item<double>(), r.loss, 1e-5 * r.loss);
    const auto named = gpt->named_parameters();
    ASSERT_EQ(named.size(), r.gradients.size()) << "the tied head is one parameter, as in PyTorch";
    for (const auto& [name, parameter] : named) {
      ASSERT_TRUE(r.gradients.contains(name)) << name;
      ASSERT_TRUE(parameter.grad().defined()) << name;
      EXPECT_LE(testing::scaled_deviation(parameter.grad(), r.gradients.at(name)), 1e-4) << name;
    }
  }
};

TEST_P(GptTorchReplay, FusedAttentionGivesPyTorchsLossAndGradients) {
  const testing::ScopedSwitch<fused_attention_enabled, set_fused_attention_enabled> fused(true);
  expect_pytorchs_loss_and_gradients();
}

TEST_P(GptTorchReplay, ReferenceAttentionGivesPyTorchsLossAndGradients) {
  const testing::ScopedSwitch<fused_attention_enabled, set_fused_attention_enabled> reference(false);
  expect_pytorchs_loss_and_gradients();
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(GptTorchReplay);

}  // namespace
}  // namespace tandem::trainers
