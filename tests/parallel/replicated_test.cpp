// parallel::ReplicatedModule and ReplicatedSGD: persistent replicas, flat gradient buffers, bucketed all_reduce.

#include "parallel/parallel_test_helpers.h"

namespace tandem::testing {
namespace {

class Replicated : public EveryDeviceSet {};

// Runs replica d on its own batch and backpropagates sum(output) * (d + 1); returns, per parameter, the reference
// sum over d of those gradients, computed with a fresh net on devices[0].
std::vector<Tensor> backward_on_every_replica(parallel::ReplicatedModule& model, uint64_t seed) {
  const auto& devices = model.devices();
  std::vector<Tensor> inputs;
  for (size_t d = 0; d < devices.size(); ++d) inputs.push_back(seeded_randn({3, 4}, devices[d], seed + d));
  const std::vector<Tensor> outputs = model.forward_replicas(inputs);
  std::vector<Tensor> losses;
  for (size_t d = 0; d < outputs.size(); ++d) losses.push_back(sum(outputs[d]) * static_cast<float>(d + 1));
  autograd::backward(losses);

  auto reference = make_net(devices[0]);
  for (size_t d = 0; d < devices.size(); ++d)
    (sum(reference->forward(inputs[d].to(devices[0]))) * static_cast<float>(d + 1)).backward();
  return gradients_of(*reference);
}

TEST_P(Replicated, ReplicaZeroIsTheMasterAndTheOthersAreEqualCopies) {
  const auto devices = this->devices();
  auto net = make_net(devices[0]);
  parallel::ReplicatedModule model(net, devices);
  ASSERT_EQ(model.size(), devices.size());
  EXPECT_EQ(model.module(), net);
  for (size_t d = 1; d < model.size(); ++d) {
    EXPECT_EQ(model.replicas()[d]->device(), devices[d]);
    expect_parameters_close(*model.replicas()[d], *net, 0.0, 0.0);
    for (const Tensor& parameter : model.replicas()[d]->parameters()) EXPECT_TRUE(parameter.is_leaf());
  }
}

TEST_P(Replicated, GradientsAreViewsOfOneBufferPerDeviceInBuckets) {
  const auto devices = this->devices();
  auto net = make_net(devices[0], 10, 20, 1);  // 200 + 20 + 20 + 1 floats
  parallel::ReplicatedModule one_bucket(make_net(devices[0], 10, 20, 1), devices);
  EXPECT_EQ(one_bucket.bucket_count(), 1u);
  // 100 bytes = 25 floats: [fc1.weight] (alone, larger than a bucket), [fc1.bias], [fc2.weight, fc2.bias].
  parallel::ReplicatedModule model(net, devices, {.bucket_size = 100});
  EXPECT_EQ(model.bucket_count(), 3u);
  for (size_t d = 0; d < model.size(); ++d) {
    const Tensor& buffer = model.gradient_buffer(d);
    EXPECT_EQ(buffer.shape(), (Shape{241}));
    EXPECT_EQ(buffer.device(), devices[d]);
    for (const Tensor& parameter : model.replicas()[d]->parameters()) {
      ASSERT_TRUE(parameter.grad().defined());
      EXPECT_TRUE(parameter.grad().shares_storage_with(buffer));
    }
  }
  EXPECT_EQ(net->fc2->bias.grad().data(), model.gradient_buffer(0).data() + 240);
  EXPECT_ERROR(model.gradient_buffer(devices.size()), "parallel::ReplicatedModule::gradient_buffer: replica");
}

TEST_P(Replicated, ReduceGradientsGivesEveryReplicaTheSum) {
  const auto devices = this->devices();
  parallel::ReplicatedModule model(make_net(devices[0]), devices, {.bucket_size = 40});
  const std::vector<Tensor> expected = backward_on_every_replica(model, 500);
  model.reduce_gradients();
  for (size_t d = 0; d < model.size(); ++d) {
    SCOPED_TRACE("replica " + std::to_string(d));
    expect_gradients_close(*model.replicas()[d], expected);
  }
  model.zero_grad();
  for (size_t d = 0; d < model.size(); ++d)
    expect_values(model.gradient_buffer(d),
                  std::vector<double>(static_cast<size_t>(model.gradient_buffer(d).numel()), 0.0),
                  model.gradient_buffer(d).shape());
}

TEST_P(Replicated, GradientsReplacedBehindItsBackAreTakenIntoTheBuffers) {
  const auto devices = this->devices();
  auto net = make_net(devices[0]);
  parallel::ReplicatedModule model(net, devices);
  for (const auto& replica : model.replicas()) replica->zero_grad();  // set_to_none: the views are dropped
  const std::vector<Tensor> expected = backward_on_every_replica(model, 600);
  model.reduce_gradients();
  for (size_t d = 0; d < model.size(); ++d) {
    expect_gradients_close(*model.replicas()[d], expected);
    for (const Tensor& parameter : model.replicas()[d]->parameters())
      EXPECT_TRUE(parameter.grad().shares_storage_with(model.gradient_buffer(d)));
  }
}

TEST_P(Replicated, FewerInputsThanReplicas) {
  const auto devices = this->devices();
  auto net = make_net(devices[0]);
  auto reference = make_net(devices[0]);
  parallel::ReplicatedModule model(net, devices);
  const Tensor x = seeded_randn({1, 4}, devices[0], 700);
  autograd::backward({sum(model.forward_replicas({x}).front())});
  model.reduce_gradients();
  sum(reference->forward(x)).backward();
  for (size_t d = 0; d < model.size(); ++d) expect_gradients_close(*model.replicas()[d], gradients_of(*reference));
}

TEST_P(Replicated, FrozenParametersStayOutOfTheBuffersAndUnchanged) {
  const auto devices = this->devices();
  auto net = make_net(devices[0]);
  net->fc1->bias.set_requires_grad(false);
  const Tensor frozen = net->fc1->bias.clone();
  parallel::ReplicatedModule model(net, devices);
  EXPECT_EQ(model.gradient_buffer(0).numel(), net->num_parameters() - 6);
  parallel::ReplicatedSGD sgd(model, {.lr = 0.1, .momentum = 0.5, .weight_decay = 0.1});
  for (int step = 0; step < 2; ++step) {
    backward_on_every_replica(model, 800);
    model.reduce_gradients();
    sgd.step();
  }
  for (size_t d = 0; d < model.size(); ++d) {
    const auto replica = std::static_pointer_cast<TwoLayerNet>(model.replicas()[d]);
    EXPECT_FALSE(replica->fc1->bias.requires_grad());
    expect_close(replica->fc1->bias, frozen, 0.0, 0.0);
    expect_parameters_close(*replica, *net, 0.0, 0.0);
  }
}

TEST_P(Replicated, SyncParametersAndMomentumBuffers) {
  const auto devices = this->devices();
  auto net = make_net(devices[0]);
  parallel::ReplicatedModule model(net, devices);
  parallel::ReplicatedSGD sgd(model, {.lr = 0.1, .momentum = 0.9});
  {
    NoGradGuard no_grad;
    net->fc2->bias.fill_(3.0f);
  }
  model.sync_parameters();
  for (size_t d = 1; d < model.size(); ++d) expect_parameters_close(*model.replicas()[d], *net, 0.0, 0.0);

  std::vector<Tensor> buffers;
  for (const Tensor& parameter : net->parameters()) buffers.push_back(Tensor::full(parameter.shape(), 0.5f));
  sgd.set_momentum_buffers(buffers);
  for (size_t d = 0; d < model.size(); ++d) {
    const std::vector<Tensor> state = sgd.optimizer(d).momentum_buffers();
    ASSERT_EQ(state.size(), buffers.size());
    EXPECT_EQ(state.front().device(), devices[d]);
    expect_close(state.back(), buffers.back(), 0.0, 0.0);
  }
  sgd.set_lr(0.25);
  EXPECT_EQ(sgd.optimizer(devices.size() - 1).options().lr, 0.25);
  EXPECT_ERROR(sgd.optimizer(devices.size()), "parallel::ReplicatedSGD::optimizer: replica");
}

TEST_P(Replicated, DocumentedErrors) {
  const auto devices = this->devices();
  auto net = make_net(devices[0]);
  EXPECT_ERROR(parallel::ReplicatedModule(nullptr, devices), "parallel::ReplicatedModule: module is null");
  EXPECT_ERROR(parallel::ReplicatedModule(net, {}), "parallel::ReplicatedModule: got no devices");
  EXPECT_ERROR(parallel::ReplicatedModule(net, {devices[0], devices[0]}),
               "parallel::ReplicatedModule: device " + devices[0].str() + " appears twice (entries 0 and 1)");
  EXPECT_ERROR(parallel::ReplicatedModule(net, devices, {.bucket_size = 0}), "bucket_size is 0");
  EXPECT_ERROR(parallel::ReplicatedModule(net, {devices[1], devices[0]}),
               "parameter 'fc1.weight' is on " + devices[0].str() + " but expected " + devices[1].str());
  EXPECT_ERROR(parallel::ReplicatedModule(std::make_shared<nn::ReLU>(), devices), "ReLU has no parameters");
  parallel::ReplicatedModule model(net, devices);
  EXPECT_ERROR(model.forward_replicas({Tensor::zeros({1, 4}, devices[1])}),
               "parallel::ReplicatedModule::forward_replicas: input 0 is on " + devices[1].str() +
                   " but replica 0 is on " + devices[0].str());
  EXPECT_ERROR(model.forward_replicas(std::vector<Tensor>(devices.size() + 1, Tensor::zeros({1, 4}, devices[0]))),
               "got " + std::to_string(devices.size() + 1) + " inputs for " + std::to_string(devices.size()));
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE_SET(Replicated);

}  // namespace
}  // namespace tandem::testing
