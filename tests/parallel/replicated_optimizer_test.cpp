// parallel::ReplicatedOptimizer: any optim::Optimizer applied on every replica of a ReplicatedModule.

#include "parallel/parallel_test_helpers.h"
#include "support/velocity_optimizer.h"

namespace tandem::testing {
namespace {

constexpr float kLr = 0.1f;
constexpr float kDecay = 0.5f;

parallel::ReplicatedOptimizer::Factory velocity() {
  return [](std::vector<Tensor> parameters) {
    return std::make_unique<VelocityOptimizer>(std::move(parameters), kLr, kDecay);
  };
}

class ReplicatedOptimizerTest : public EveryDeviceSet {};

// The summed gradients and one optimizer per replica keep the replicas equal and equal to one device stepping on
// the sum of the replicas' gradients.
TEST_P(ReplicatedOptimizerTest, EveryReplicaTakesTheSameStepAsOneDevice) {
  const auto devices = this->devices();
  auto net = make_net(devices[0]);
  auto reference = make_net(devices[0]);
  parallel::ReplicatedModule model(net, devices, {.bucket_size = 40});
  parallel::ReplicatedOptimizer optimizer(model, velocity());
  VelocityOptimizer reference_optimizer(reference->parameters(), kLr, kDecay);
  ASSERT_EQ(optimizer.size(), devices.size());
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    std::vector<Tensor> inputs;
    for (size_t d = 0; d < devices.size(); ++d) inputs.push_back(seeded_randn({3, 4}, devices[d], 40 * step + d));
    optimizer.zero_grad();
    model.forward_backward(inputs, [](size_t i, const Tensor& output) { return sum(output) * (i + 1.0f); });
    optimizer.step();
    reference_optimizer.zero_grad();
    for (size_t d = 0; d < devices.size(); ++d)
      (sum(reference->forward(inputs[d].to(devices[0]))) * (d + 1.0f)).backward();
    reference_optimizer.step();
    expect_parameters_close(*net, *reference);
    for (size_t d = 1; d < model.size(); ++d) expect_parameters_close(*model.replicas()[d], *net, 0.0, 0.0);
  }
  const std::vector<Tensor> state = optimizer.state();
  ASSERT_EQ(state.size(), 4u);
  expect_close(state[3], reference_optimizer.state()[3]);
}

TEST_P(ReplicatedOptimizerTest, StateIsTheMastersAndSettingItSetsEveryReplicas) {
  const auto devices = this->devices();
  auto net = make_net(devices[0]);
  parallel::ReplicatedModule model(net, devices);
  parallel::ReplicatedOptimizer optimizer(model, velocity());
  for (const Tensor& value : optimizer.state()) EXPECT_FALSE(value.defined());
  std::vector<Tensor> state;
  for (const Tensor& parameter : net->parameters()) state.push_back(Tensor::full(parameter.shape(), 0.25f));
  state[1] = Tensor();
  optimizer.set_state(state);
  for (size_t d = 0; d < model.size(); ++d) {
    const std::vector<Tensor> replica_state = optimizer.optimizer(d).state();
    EXPECT_FALSE(replica_state[1].defined());
    EXPECT_EQ(replica_state[0].device(), devices[d]);
    expect_close(replica_state[3], state[3], 0.0, 0.0);
  }
}

// ReplicatedSGD is the ReplicatedOptimizer of optim::SGD.
TEST_P(ReplicatedOptimizerTest, ReplicatedSgdIsOneOfThem) {
  const auto devices = this->devices();
  parallel::ReplicatedModule model(make_net(devices[0]), devices);
  parallel::ReplicatedSGD sgd(model, {.lr = 0.1, .momentum = 0.9});
  const parallel::ReplicatedOptimizer& optimizer = sgd;
  EXPECT_EQ(&optimizer.optimizer(1), &sgd.optimizer(1));
  EXPECT_EQ(sgd.options().momentum, 0.9);
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE_SET(ReplicatedOptimizerTest);

TEST(ReplicatedOptimizerErrors, TheFactoryMustBuildAnOptimizerOverTheReplicasParameters) {
  const std::vector<Device> devices = {Device::cpu(0), Device::cpu(1)};
  parallel::ReplicatedModule model(make_net(devices[0]), devices);
  EXPECT_ERROR(parallel::ReplicatedOptimizer(model, nullptr), "parallel::ReplicatedOptimizer: the factory is empty");
  EXPECT_ERROR(parallel::ReplicatedOptimizer(model, [](std::vector<Tensor>) { return nullptr; }),
               "parallel::ReplicatedOptimizer: the factory returned null for replica 0");
  const Tensor stray = Tensor::zeros({2}).set_requires_grad(true);
  EXPECT_ERROR(
      parallel::ReplicatedOptimizer(
          model,
          [&](std::vector<Tensor>) { return std::make_unique<VelocityOptimizer>(std::vector{stray}, kLr, kDecay); }),
      "parallel::ReplicatedOptimizer: the factory returned an optimizer over 1 parameters for replica 0 that "
      "are not the 4 parameters it was given");
  parallel::ReplicatedOptimizer optimizer(model, velocity());
  EXPECT_ERROR(optimizer.optimizer(2), "parallel::ReplicatedOptimizer::optimizer: replica 2 but there are 2");
  EXPECT_ERROR(VelocityOptimizer({}, kLr, kDecay), "VelocityOptimizer: got an empty parameter list");
}

}  // namespace
}  // namespace tandem::testing
