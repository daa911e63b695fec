// parallel::replicate: deep copies per device whose gradients are summed on the master parameters.

#include <functional>

#include "parallel/parallel_test_helpers.h"

namespace tandem::testing {
namespace {

class Replicate : public EveryDeviceSet {};

TEST_P(Replicate, ReplicasEqualTheMasterOnEachDeviceAndAreNotLeaves) {
  const auto devices = this->devices();
  auto net = make_net(devices[0]);
  const auto replicas = parallel::replicate(net, devices);
  ASSERT_EQ(replicas.size(), devices.size());
  const auto master = net->named_parameters();
  for (size_t d = 0; d < devices.size(); ++d) {
    SCOPED_TRACE("replica " + std::to_string(d));
    ASSERT_NE(replicas[d].get(), net.get());
    const auto copy = replicas[d]->named_parameters();
    ASSERT_EQ(copy.size(), master.size());
    for (size_t i = 0; i < copy.size(); ++i) {
      EXPECT_EQ(copy[i].first, master[i].first);
      EXPECT_EQ(copy[i].second.device(), devices[d]);
      EXPECT_FALSE(copy[i].second.is_leaf());
      EXPECT_TRUE(copy[i].second.requires_grad());
      expect_close(copy[i].second, master[i].second, 0.0, 0.0);
      // On the master's device the copy shares the master's storage; elsewhere it is a copy of its own.
      EXPECT_EQ(copy[i].second.shares_storage_with(master[i].second), d == 0);
    }
  }
}

TEST_P(Replicate, GradientsOfAllReplicasAreSummedOnTheMaster) {
  const auto devices = this->devices();
  auto net = make_net(devices[0]);
  auto reference = make_net(devices[0]);
  const auto replicas = parallel::replicate(net, devices);
  std::vector<Tensor> losses;
  std::vector<Tensor> reference_losses;
  for (size_t d = 0; d < devices.size(); ++d) {
    const Tensor x = seeded_randn({3, 4}, devices[d], 40 + d);
    losses.push_back(sum(replicas[d]->forward(x)) * static_cast<float>(d + 1));
    reference_losses.push_back(sum(reference->forward(x.to(devices[0]))) * static_cast<float>(d + 1));
  }
  autograd::backward(losses);
  autograd::backward(reference_losses);
  expect_gradients_close(*net, gradients_of(*reference));
  for (const Tensor& parameter : net->parameters()) EXPECT_EQ(parameter.grad().device(), devices[0]);
  for (const auto& replica : replicas)
    for (const Tensor& parameter : replica->parameters()) EXPECT_FALSE(parameter.grad().defined());
}

// The replicas share one Broadcast node (Note [Replica gradient edges]), which saves no tensors and so runs in each
// replica's own backward; the replicas' Linear nodes save their inputs and weights and run once.
TEST_P(Replicate, OneBackwardPerReplicaAddsEachReplicasGradientOnTheMaster) {
  const std::vector<Device> devices{this->devices()[0], this->devices()[1]};
  auto linear = std::make_shared<nn::Linear>(3, 2, true, devices[0]);
  const auto replicas = parallel::replicate(linear, devices);
  const std::shared_ptr<autograd::Node> broadcast = replicas[0]->weight.grad_fn();
  ASSERT_NE(broadcast, nullptr);
  EXPECT_EQ(broadcast->name(), "Broadcast");
  EXPECT_EQ(replicas[1]->bias.grad_fn(), broadcast);

  // loss_d = c_d * sum(x_d W^T + b): dW = c_d * (the column sums of x_d) in every row, db = c_d * rows(x_d).
  const Tensor loss0 = sum(replicas[0]->forward(Tensor::from_vector({1, 2, 3, 4, 5, 6}, {2, 3}, devices[0])));
  const Tensor loss1 = sum(replicas[1]->forward(Tensor::from_vector({1, 0, -1}, {1, 3}, devices[1]))) * 2.0f;
  loss0.backward();
  expect_values(linear->weight.grad(), {5, 7, 9, 5, 7, 9}, {2, 3}, 0.0, 0.0);
  expect_values(linear->bias.grad(), {2, 2}, {2}, 0.0, 0.0);
  loss1.backward();
  expect_values(linear->weight.grad(), {7, 7, 7, 7, 7, 7}, {2, 3}, 0.0, 0.0);
  expect_values(linear->bias.grad(), {4, 4}, {2}, 0.0, 0.0);
  EXPECT_EQ(linear->weight.grad().device(), devices[0]);

  // A replica's own graph runs once: its LinearBackward is refused before anything reaches the master.
  EXPECT_ERROR(loss1.backward(), "backward: LinearBackward's saved tensors were freed by an earlier backward; pass "
               "retain_graph=true to the first backward to run it twice");
  expect_values(linear->weight.grad(), {7, 7, 7, 7, 7, 7}, {2, 3}, 0.0, 0.0);
  for (const auto& replica : replicas)
    for (const Tensor& parameter : replica->parameters()) EXPECT_FALSE(parameter.grad().defined());
}

TEST_P(Replicate, OneBackwardPerReplicaMatchesOneDevice) {
  const auto devices = this->devices();
  auto net = make_net(devices[0]);
  auto reference = make_net(devices[0]);
  const auto replicas = parallel::replicate(net, devices);
  for (size_t d = 0; d < devices.size(); ++d) {
    SCOPED_TRACE("after the backward of replica " + std::to_string(d));
    const Tensor x = seeded_randn({3, 4}, devices[d], 60 + d);
    (sum(replicas[d]->forward(x)) * static_cast<float>(d + 1)).backward();
    (sum(reference->forward(x.to(devices[0]))) * static_cast<float>(d + 1)).backward();
    expect_gradients_close(*net, gradients_of(*reference));
  }
}

TEST_P(Replicate, OneBackwardPerReplicaOnEveryWorkerAtOnce) {
  // Each replica's forward and backward on its device's worker, all at once: the shared Broadcast node and the
  // master parameters' accumulators run one backward at a time.
  const auto devices = this->devices();
  auto net = make_net(devices[0]);
  auto reference = make_net(devices[0]);
  const auto replicas = parallel::replicate(net, devices);
  std::vector<Tensor> inputs;
  std::vector<std::function<void()>> tasks;
  for (size_t d = 0; d < devices.size(); ++d) {
    inputs.push_back(seeded_randn({5, 4}, devices[d], 70 + d));
    tasks.push_back([&, d] { sum(replicas[d]->forward(inputs[d])).backward(); });
    sum(reference->forward(inputs[d].to(devices[0]))).backward();
  }
  parallel::run_on_devices(tasks, devices);
  expect_gradients_close(*net, gradients_of(*reference));
}

TEST_P(Replicate, MasterOnADeviceThatIsNotAmongTheReplicas) {
  const auto devices = this->devices();
  auto net = make_net(devices.back());
  auto reference = make_net(devices.back());
  const std::vector<Device> targets(devices.begin(), devices.end() - 1);
  const auto replicas = parallel::replicate(net, targets);
  ASSERT_EQ(replicas.size(), targets.size());
  std::vector<Tensor> losses;
  for (size_t d = 0; d < targets.size(); ++d) {
    EXPECT_EQ(replicas[d]->device(), targets[d]);
    const Tensor x = seeded_randn({2, 4}, targets[d], 50 + d);
    losses.push_back(sum(replicas[d]->forward(x)));
    sum(reference->forward(x.to(devices.back()))).backward();
  }
  autograd::backward(losses);
  expect_gradients_close(*net, gradients_of(*reference));
}

TEST_P(Replicate, WithGradModeOffReplicasArePlainCopies) {
  const auto devices = this->devices();
  auto net = make_net(devices[0]);
  NoGradGuard no_grad;
  const auto replicas = parallel::replicate(net, devices);
  for (size_t d = 0; d < devices.size(); ++d) {
    for (const Tensor& parameter : replicas[d]->parameters()) {
      EXPECT_EQ(parameter.device(), devices[d]);
      EXPECT_TRUE(parameter.grad_fn() == nullptr);
    }
  }
  expect_close(replicas.back()->forward(Tensor::ones({1, 4}, devices.back())),
               net->forward(Tensor::ones({1, 4}, devices[0])));
}

TEST_P(Replicate, TypedOverloadKeepsTheLayerType) {
  const auto devices = this->devices();
  auto linear = std::make_shared<nn::Linear>(3, 2, true, devices[0]);
  const std::vector<std::shared_ptr<nn::Linear>> replicas = parallel::replicate(linear, devices);
  ASSERT_EQ(replicas.size(), devices.size());
  for (size_t d = 0; d < devices.size(); ++d) {
    EXPECT_EQ(replicas[d]->weight.device(), devices[d]);
    EXPECT_EQ(replicas[d]->in_features(), 3);
    expect_close(replicas[d]->bias, linear->bias, 0.0, 0.0);
  }
}

TEST_P(Replicate, SequentialAndModulesWithoutParameters) {
  const auto devices = this->devices();
  manual_seed(7);
  auto sequential = std::make_shared<nn::Sequential>(std::initializer_list<std::shared_ptr<nn::Module>>{
      std::make_shared<nn::Linear>(3, 3, true, devices[0]), std::make_shared<nn::ReLU>(),
      std::make_shared<nn::Linear>(3, 1, true, devices[0])});
  const auto replicas = parallel::replicate(sequential, devices);
  const Tensor x = seeded_randn({4, 3}, devices.back(), 8);
  expect_close(replicas.back()->forward(x), sequential->forward(x.to(devices[0])));
  EXPECT_EQ(replicas.back()->named_parameters().back().first, "2.bias");

  const auto relus = parallel::replicate(std::make_shared<nn::ReLU>(), devices);
  ASSERT_EQ(relus.size(), devices.size());
  expect_values(relus.back()->forward(Tensor::from_vector({-1, 2}, {2}, devices.back())), {0, 2}, {2});
}

TEST_P(Replicate, EmptyDeviceListGivesNoReplicas) {
  EXPECT_TRUE(parallel::replicate(make_net(devices()[0]), {}).empty());
}

class NotClonable : public nn::Module {
 public:
  NotClonable() { register_parameter("w", w); }
  Tensor forward(const Tensor& x) override { return x * w; }
  Tensor w = Tensor::ones({1});
};

TEST_P(Replicate, DocumentedErrors) {
  const auto devices = this->devices();
  auto net = make_net(devices[0]);
  EXPECT_ERROR(parallel::replicate(std::shared_ptr<nn::Module>(), devices), "parallel::replicate: module is null");
  EXPECT_ERROR(parallel::replicate(net, {devices[1], devices[0], devices[1]}),
               "parallel::replicate: device " + devices[1].str() + " appears twice (entries 0 and 2)");
  EXPECT_ERROR(parallel::replicate(net, {devices[0], Device::cuda(7)}), "cuda:7 does not exist");
  net->fc2->to(devices[1]);
  EXPECT_ERROR(parallel::replicate(net, devices), "parallel::replicate: parameter 'fc2.weight' is on " +
                                                      devices[1].str() + " but expected " + devices[0].str() +
                                                      " (where 'fc1.weight' is; all parameters must be on one device)");
  EXPECT_ERROR(parallel::replicate(std::make_shared<NotClonable>(), devices),
               "parallel::replicate: nn::Module::clone_with_parameters: NotClonable does not derive from "
               "nn::Cloneable<NotClonable>");
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE_SET(Replicate);

}  // namespace
}  // namespace tandem::testing
