// The central invariant: data-parallel SGD on N devices gives the parameters of single-device SGD on the whole
// batch, step for step (momentum and weight decay included), for the explicit scatter/replicate/parallel_apply loop,
// for DataParallel, and for the replicated fast path.

#include "parallel/parallel_test_helpers.h"

namespace tandem::testing {
namespace {

constexpr optim::SGDOptions kOptions{.lr = 0.05, .momentum = 0.9, .weight_decay = 1e-3};
// Even, uneven and smaller-than-the-device-count batches.
const std::vector<int64_t> kBatchRows = {12, 13, 7, 2, 1, 9};

std::shared_ptr<TwoLayerNet> make_regression_net(Device device) { return make_net(device, 10, 20, 1); }

struct Batch {
  Tensor x;
  Tensor y;
};

Batch batch(size_t step, Device device) {
  return {seeded_randn({kBatchRows[step], 10}, device, 300 + step),
          seeded_randn({kBatchRows[step], 1}, device, 400 + step)};
}

// The reference: plain SGD on one device over the whole batch.
std::shared_ptr<TwoLayerNet> train_on_one_device(Device device) {
  auto net = make_regression_net(device);
  optim::SGD sgd(net->parameters(), kOptions);
  for (size_t step = 0; step < kBatchRows.size(); ++step) {
    const Batch b = batch(step, device);
    sgd.zero_grad();
    nn::mse_loss(net->forward(b.x), b.y).backward();
    sgd.step();
  }
  return net;
}

class TrainingEquivalence : public EveryDeviceSet {};

// Each step scatters input and target, replicates, runs the replicas, and backpropagates every replica's MSE
// weighted by its share of the rows in ONE backward pass, so the master receives the full-batch gradient.
TEST_P(TrainingEquivalence, ExplicitScatterReplicateApplyLoop) {
  const auto devices = this->devices();
  auto net = make_regression_net(devices[0]);
  optim::SGD sgd(net->parameters(), kOptions);
  for (size_t step = 0; step < kBatchRows.size(); ++step) {
    const Batch b = batch(step, devices[0]);
    const std::vector<Tensor> inputs = parallel::scatter(b.x, devices);
    const std::vector<Device> used(devices.begin(), devices.begin() + static_cast<std::ptrdiff_t>(inputs.size()));
    const std::vector<Tensor> targets = comm::scatter(b.y, used);
    const std::vector<Tensor> outputs = parallel::parallel_apply(parallel::replicate(net, used), inputs);
    std::vector<Tensor> losses;
    for (size_t i = 0; i < outputs.size(); ++i) {
      const float share = static_cast<float>(inputs[i].size(0)) / static_cast<float>(b.x.size(0));
      losses.push_back(nn::mse_loss(outputs[i], targets[i]) * share);
    }
    sgd.zero_grad();
    autograd::backward(losses);
    sgd.step();
  }
  expect_parameters_close(*net, *train_on_one_device(devices[0]));
}

TEST_P(TrainingEquivalence, DataParallelModule) {
  const auto devices = this->devices();
  auto net = make_regression_net(devices[0]);
  parallel::DataParallel model(net, devices);
  optim::SGD sgd(model.parameters(), kOptions);
  for (size_t step = 0; step < kBatchRows.size(); ++step) {
    const Batch b = batch(step, devices[0]);
    sgd.zero_grad();
    nn::mse_loss(model(b.x), b.y).backward();
    sgd.step();
  }
  expect_parameters_close(*net, *train_on_one_device(devices[0]));
}

// The fast path with small buckets (several all_reduce calls per step) and the loss on the gathered output.
TEST_P(TrainingEquivalence, ReplicatedFastPathStaysInSyncAndMatchesOneDevice) {
  const auto devices = this->devices();
  auto net = make_regression_net(devices[0]);
  parallel::ReplicatedModule model(net, devices, {.bucket_size = 128});
  ASSERT_GT(model.bucket_count(), 1u);
  parallel::ReplicatedSGD sgd(model, kOptions);
  for (size_t step = 0; step < kBatchRows.size(); ++step) {
    const Batch b = batch(step, devices[0]);
    model.zero_grad();
    const std::vector<Tensor> outputs = model.forward_replicas(parallel::scatter(b.x, devices));
    nn::mse_loss(parallel::gather(outputs, devices[0]), b.y).backward();
    model.reduce_gradients();
    sgd.step();
  }
  const auto reference = train_on_one_device(devices[0]);
  expect_parameters_close(*net, *reference);
  for (size_t d = 1; d < model.size(); ++d) {
    SCOPED_TRACE("replica " + std::to_string(d));
    expect_parameters_close(*model.replicas()[d], *net, 0.0, 0.0);  // identical updates: bit-equal replicas
  }
}

// The fast path and the plain path agree step for step, here with per-replica losses.
TEST_P(TrainingEquivalence, ReplicatedFastPathEqualsThePlainPathEachStep) {
  const auto devices = this->devices();
  auto fast_net = make_regression_net(devices[0]);
  auto plain_net = make_regression_net(devices[0]);
  parallel::ReplicatedModule fast(fast_net, devices);
  parallel::ReplicatedSGD fast_sgd(fast, kOptions);
  optim::SGD plain_sgd(plain_net->parameters(), kOptions);
  for (size_t step = 0; step < kBatchRows.size(); ++step) {
    SCOPED_TRACE("step " + std::to_string(step));
    const Batch b = batch(step, devices[0]);
    const std::vector<Tensor> inputs = parallel::scatter(b.x, devices);
    const std::vector<Device> used(devices.begin(), devices.begin() + static_cast<std::ptrdiff_t>(inputs.size()));
    const std::vector<Tensor> targets = comm::scatter(b.y, used);
    auto weighted_losses = [&](const std::vector<Tensor>& outputs) {
      std::vector<Tensor> losses;
      for (size_t i = 0; i < outputs.size(); ++i)
        losses.push_back(nn::mse_loss(outputs[i], targets[i]) *
                         (static_cast<float>(inputs[i].size(0)) / static_cast<float>(b.x.size(0))));
      return losses;
    };
    fast_sgd.zero_grad();
    autograd::backward(weighted_losses(fast.forward_replicas(inputs)));
    fast.reduce_gradients();
    fast_sgd.step();

    plain_sgd.zero_grad();
    autograd::backward(weighted_losses(parallel::parallel_apply(parallel::replicate(plain_net, used), inputs)));
    plain_sgd.step();
    expect_parameters_close(*fast_net, *plain_net);
  }
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE_SET(TrainingEquivalence);

}  // namespace
}  // namespace tandem::testing
