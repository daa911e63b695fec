// nn::scaled_dot_product_attention against PyTorch's own, on the inputs that
// tests/nn/torch_replay/make_attention_replay.py drew and the float32 outputs and gradients PyTorch computed for them
// (causal and not, L != S, head dims 16 to 128, a value width of its own, a scale, float and boolean masks): within
// 1e-5 (absolute and relative) on every device, through the fused op where it applies and through the reference path.
#include <optional>

#include "nn/torch_replay/replay_cases.h"
#include "support/test_support.h"
#include "tandem/nn/attention.h"

namespace tandem {
namespace {

const std::vector<testing::ReplayCase>& replay_cases() {
  static const std::vector<testing::ReplayCase> cases =
      testing::load_replay_cases(TANDEM_SOURCE_DIR "/tests/nn/torch_replay/attention_replay.safetensors");
  return cases;
}

class AttentionTorchReplay : public testing::EveryDevice {
 protected:
  void expect_pytorchs_results() {
    ASSERT_EQ(replay_cases().size(), 6u);
    for (const testing::ReplayCase& c : replay_cases()) {
      SCOPED_TRACE(c.name);
      const bool is_causal = c.settings.at("is_causal").get<bool>();
      const nlohmann::json& scale_setting = c.settings.at("scale");
      const std::optional<double> scale =
          scale_setting.is_null() ? std::nullopt : std::optional(scale_setting.get<double>());
      // Copies: the file's tensors are shared by every test, and a leaf given requires_grad keeps its .grad.
      const auto part = [&](const std::string& name) { return c.parts.at(name).to(device()).clone(); };
      const Tensor q = part("query").set_requires_grad(true);
      const Tensor k = part("key").set_requires_grad(true);
      const Tensor v = part("value").set_requires_grad(true);
      const Tensor mask = c.parts.contains("mask") ? part("mask") : Tensor();
      const Tensor out = nn::scaled_dot_product_attention(q, k, v, mask, 0.0, is_causal, scale);
      sum(out * part("weights")).backward();
      testing::expect_close(out, c.parts.at("out"), 1e-5, 1e-5);
      testing::expect_close(q.grad(), c.parts.at("grad_query"), 1e-5, 1e-5);
      testing::expect_close(k.grad(), c.parts.at("grad_key"), 1e-5, 1e-5);
      testing::expect_close(v.grad(), c.parts.at("grad_value"), 1e-5, 1e-5);
    }
  }
};

TEST_P(AttentionTorchReplay, FusedWhereItAppliesGivesPyTorchsResults) {
  const testing::ScopedSwitch<fused_attention_enabled, set_fused_attention_enabled> fused(true);
  expect_pytorchs_results();
}

TEST_P(AttentionTorchReplay, ReferencePathGivesPyTorchsResults) {
  const testing::ScopedSwitch<fused_attention_enabled, set_fused_attention_enabled> reference(false);
  expect_pytorchs_results();
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(AttentionTorchReplay);

}  // namespace
}  // namespace tandem
