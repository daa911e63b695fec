// nn::BatchNorm2d against torch.nn.BatchNorm2d, on the inputs that tests/nn/torch_replay/make_batch_norm2d_replay.py
// drew and the float32 results PyTorch computed for them (momentum, a cumulative average, no affine, no running
// statistics): two training steps' outputs, the second step's gradients, the buffers after both, and an eval forward,
// on every device.
#include <optional>

#include "nn/torch_replay/replay_cases.h"
#include "support/test_support.h"

namespace tandem {
namespace {

const std::vector<testing::ReplayCase>& batch_norm2d_replay_cases() {
  static const std::vector<testing::ReplayCase> cases =
      testing::load_replay_cases(TANDEM_SOURCE_DIR "/tests/nn/torch_replay/batch_norm2d_replay.safetensors");
  return cases;
}

class BatchNorm2dTorchReplay : public testing::EveryDevice {};

TEST_P(BatchNorm2dTorchReplay, TrainingStepsGradientsBuffersAndEvalArePyTorchs) {
  ASSERT_EQ(batch_norm2d_replay_cases().size(), 4u);
  for (const testing::ReplayCase& c : batch_norm2d_replay_cases()) {
    SCOPED_TRACE(c.name);
    const double eps = c.settings.at("eps").get<double>();
    const nlohmann::json& momentum_setting = c.settings.at("momentum");
    const std::optional<double> momentum =
        momentum_setting.is_null() ? std::nullopt : std::optional(momentum_setting.get<double>());
    const bool affine = c.settings.at("affine").get<bool>();
    const bool track_running_stats = c.settings.at("track_running_stats").get<bool>();
    // Copies: the file's tensors are shared by every test.
    const auto part = [&](const std::string& name) { return c.parts.at(name).to(device()).clone(); };
    const auto expected = [&](const std::string& name) { return c.parts.at(name); };
    const int64_t channels = c.parts.at("x0").size(1);
    nn::BatchNorm2d norm(channels, eps, momentum, affine, track_running_stats, device());
    if (affine) {
      NoGradGuard no_grad;
      norm.weight.copy_(part("weight"));
      norm.bias.copy_(part("bias"));
    }
    testing::expect_close(norm(part("x0")), expected("out0"), 1e-4, 1e-4);
    const Tensor x1 = part("x1").set_requires_grad(true);
    const Tensor out1 = norm(x1);
    testing::expect_close(out1, expected("out1"), 1e-4, 1e-4);
    sum(out1 * part("cotangent")).backward();
    testing::expect_close(x1.grad(), expected("grad_input"), 1e-4, 1e-4);
    if (affine) {
      // Both steps' uses of weight and bias took part, but only the second step ran backward.
      testing::expect_close(norm.weight.grad(), expected("grad_weight"), 1e-4, 1e-4);
      testing::expect_close(norm.bias.grad(), expected("grad_bias"), 1e-4, 1e-4);
    }
    if (track_running_stats) {
      testing::expect_close(norm.running_mean, expected("running_mean"), 1e-5, 1e-5);
      testing::expect_close(norm.running_var, expected("running_var"), 1e-5, 1e-5);
      testing::expect_int64_values(norm.num_batches_tracked, {expected("num_batches_tracked").item<int64_t>()}, {});
    } else {
      EXPECT_TRUE(norm.buffers().empty());
    }
    norm.eval();
    testing::expect_close(norm(part("x_eval")), expected("out_eval"), 1e-4, 1e-4);
  }
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(BatchNorm2dTorchReplay);

}  // namespace
}  // namespace tandem
