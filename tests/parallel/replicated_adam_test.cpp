// parallel::ReplicatedAdam / ReplicatedAdamW: one optim::Adam(W) per replica of a ReplicatedModule, stepping like one
// device on the summed gradients; its state by name and learning rate on every replica.

#include "parallel/parallel_test_helpers.h"

namespace tandem::testing {
namespace {

class ReplicatedAdamTest : public EveryDeviceSet {};

TEST_P(ReplicatedAdamTest, EveryReplicaStepsLikeOneDeviceAndSharesItsState) {
  const auto devices = this->devices();
  auto net = make_net(devices[0]);
  auto reference = make_net(devices[0]);
  parallel::ReplicatedModule model(net, devices, {.bucket_size = 40});
  const optim::AdamWOptions options{.lr = 0.01, .weight_decay = 0.1, .amsgrad = true};
  parallel::ReplicatedAdamW adamw(model, options);
  optim::AdamW reference_adamw(reference->parameters(), options);
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    if (step == 2) {
      adamw.set_lr(0.005);
      reference_adamw.set_lr(0.005);
    }
    std::vector<Tensor> inputs;
    for (size_t d = 0; d < devices.size(); ++d) inputs.push_back(seeded_randn({3, 4}, devices[d], 40 * step + d));
    adamw.zero_grad();
    model.forward_backward(inputs, [](size_t i, const Tensor& output) { return sum(output) * (i + 1.0f); });
    adamw.step();
    reference_adamw.zero_grad();
    for (size_t d = 0; d < devices.size(); ++d)
      (sum(reference->forward(inputs[d].to(devices[0]))) * (d + 1.0f)).backward();
    reference_adamw.step();
    expect_parameters_close(*net, *reference);
    for (size_t d = 1; d < model.size(); ++d) expect_parameters_close(*model.replicas()[d], *net, 0.0, 0.0);
  }
  EXPECT_EQ(adamw.optimizer(devices.size() - 1).lr(0), 0.005);

  const optim::OptimizerState state = adamw.state_dict();
  EXPECT_EQ(state.kind, "optim::AdamW");
  parallel::ReplicatedModule other_model(make_net(devices[0]), devices);
  parallel::ReplicatedAdamW other(other_model, options);
  other.load_state_dict(state);
  for (size_t d = 0; d < other.size(); ++d) {
    const optim::OptimizerState replica = other.optimizer(d).state_dict();
    EXPECT_EQ(replica.parameters[0].step, 3);
    EXPECT_EQ(replica.parameters[0].tensors[0].second.device(), devices[d]);
    expect_close(replica.parameters[0].tensors[0].second, state.parameters[0].tensors[0].second, 0.0, 0.0);
  }
  EXPECT_ERROR(adamw.state(), "optim::AdamW::state: its state has more than one tensor per parameter");
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE_SET(ReplicatedAdamTest);

TEST(ReplicatedAdam, BuildsOneAdamPerReplica) {
  const std::vector<Device> devices = {Device::cpu(0), Device::cpu(1)};
  parallel::ReplicatedModule model(make_net(devices[0]), devices);
  parallel::ReplicatedAdam adam(model, {.lr = 0.02});
  EXPECT_EQ(adam.size(), 2u);
  EXPECT_EQ(dynamic_cast<optim::Adam&>(adam.optimizer(1)).options().lr, 0.02);
  EXPECT_ERROR(parallel::ReplicatedAdam(model, {.lr = -1}), "optim::Adam: lr must be >= 0, got -1");
}

}  // namespace
}  // namespace tandem::testing
