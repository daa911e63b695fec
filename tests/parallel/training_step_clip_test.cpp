// TrainingStepOptions::max_grad_norm: the summed gradients clipped before each optimizer step, against
// torch.nn.utils.clip_grad_norm_ between backward and step on one device, and captured on a GPU as eager.

#include <memory>

#include "parallel/parallel_test_helpers.h"
#include "tandem/parallel/training_step.h"

namespace tandem::testing {
namespace {

constexpr double kMaxNorm = 0.05;  // far below the nets' gradient norms, so every step clips

// A plain loop on one device: forward, backward, clip_grad_norm_, AdamW's step.
std::shared_ptr<TwoLayerNet> clipped_reference(int steps, const std::vector<std::pair<Tensor, Tensor>>& batches) {
  auto net = make_net(Device::cpu(0));
  optim::AdamW adamw(net->parameters(), {.lr = 0.01, .weight_decay = 0.05});
  for (int s = 0; s < steps; ++s) {
    net->zero_grad();
    nn::mse_loss(net->forward(batches[s].first), batches[s].second).backward();
    const float norm = nn::utils::clip_grad_norm_(net->parameters(), kMaxNorm).item();
    EXPECT_GT(norm, kMaxNorm) << "step " << s << " would not clip";
    adamw.step();
  }
  return net;
}

std::vector<std::pair<Tensor, Tensor>> batches(int steps) {
  std::vector<std::pair<Tensor, Tensor>> out;
  for (int s = 0; s < steps; ++s) {
    out.emplace_back(seeded_randn({12, 4}, Device::cpu(0), 10 + s), seeded_randn({12, 2}, Device::cpu(0), 50 + s));
  }
  return out;
}

TEST(TrainingStepClipping, TwoDevicesClipTheSummedGradientsAsOneDeviceClipsItsOwn) {
  constexpr int kSteps = 4;
  const auto data = batches(kSteps);
  const auto expected = clipped_reference(kSteps, data);

  auto net = make_net(Device::cpu(0));
  parallel::ReplicatedModule model(net, {Device::cpu(0), Device::cpu(1)});
  parallel::ReplicatedAdamW adamw(model, {.lr = 0.01, .weight_decay = 0.05});
  parallel::TrainingStep step(model, adamw, nn::mse_loss, {.max_grad_norm = kMaxNorm});
  for (int s = 0; s < kSteps; ++s) step.step({.features = data[s].first, .targets = data[s].second});
  EXPECT_EQ(step.strategy(), parallel::StepStrategy::Eager) << "clipping needs the whole reduction first";
  expect_parameters_close(*net, *expected, 1e-5, 1e-6);
}

TEST(TrainingStepClipping, ANegativeNormIsAnError) {
  auto net = make_net(Device::cpu(0));
  parallel::ReplicatedModule model(net, {Device::cpu(0)});
  parallel::ReplicatedSGD sgd(model, {.lr = 0.1});
  EXPECT_ERROR(parallel::TrainingStep(model, sgd, nn::mse_loss, {.max_grad_norm = -1.0}),
               "parallel::TrainingStep: max_grad_norm is -1 but expected a number >= 0");
}

TEST(TrainingStepClippingCUDA, ACapturedClippedStepEqualsTheEagerOne) {
  TANDEM_REQUIRE_GPUS(1);
  constexpr int kSteps = 6;
  const auto data = batches(kSteps);
  const auto run = [&](bool capture) {
    auto net = make_net(Device::cuda(0));
    auto model = std::make_unique<parallel::ReplicatedModule>(net, std::vector<Device>{Device::cuda(0)});
    auto adamw = std::make_unique<parallel::ReplicatedAdamW>(*model, optim::AdamWOptions{.lr = 0.01});
    parallel::TrainingStep step(*model, *adamw, nn::mse_loss, {.capture = capture, .max_grad_norm = kMaxNorm});
    int captured = 0;
    for (int s = 0; s < kSteps; ++s) {
      step.step({.features = data[s].first.to(Device::cuda(0)), .targets = data[s].second.to(Device::cuda(0))});
      captured += step.captured() ? 1 : 0;
    }
    EXPECT_EQ(captured, capture ? kSteps - 2 : 0) << step.fallback_reason();
    return net->parameters();
  };
  const std::vector<Tensor> eager = run(false), captured = run(true);
  for (size_t i = 0; i < eager.size(); ++i) EXPECT_EQ(max_abs_diff(captured[i], eager[i]), 0.0) << "parameter " << i;
}

}  // namespace
}  // namespace tandem::testing
