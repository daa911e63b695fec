// Buffers under data parallelism, as PyTorch's DataParallel: the master's count. replicate() shares them with the
// replica on the master's device and copies them for the others; ReplicatedModule copies the master's onto the other
// replicas before each forward. BatchNorm's running statistics therefore follow replica 0's share of each batch.
#include "support/test_support.h"

namespace tandem {
namespace {

class ReplicatedBuffersTest : public testing::EveryDeviceSet {};

std::shared_ptr<nn::Sequential> batch_norm_net(Device device) {
  return std::make_shared<nn::Sequential>(nn::Linear(3, 4, true, device),
                                          nn::BatchNorm1d(4, 1e-5, 0.1, true, true, device));
}

TEST_P(ReplicatedBuffersTest, ReplicateSharesBuffersOnTheMastersDeviceAndCopiesThemElsewhere) {
  manual_seed(61);
  const std::vector<Device> devices = this->devices();
  auto net = batch_norm_net(devices[0]);
  const auto replicas = parallel::replicate(net, devices);
  const Tensor master_mean = net->named_buffers()[0].second;
  EXPECT_EQ(replicas[0]->buffers()[0].data_ptr(), master_mean.data_ptr());
  for (size_t d = 1; d < devices.size(); ++d) {
    EXPECT_EQ(replicas[d]->buffers()[0].device(), devices[d]);
    EXPECT_NE(replicas[d]->buffers()[0].data_ptr(), master_mean.data_ptr());
  }
  // Replica 0's update of the running statistics is the master's, as if the master had seen replica 0's rows.
  const Tensor x = Tensor::randn({4, 3}, devices[0]);
  auto reference = std::static_pointer_cast<nn::Sequential>(net->clone());
  replicas[0]->forward(x);
  (*reference)(x);
  testing::expect_close(master_mean, reference->named_buffers()[0].second);
  EXPECT_EQ(net->named_buffers()[2].second.item<int64_t>(), 1);
}

TEST_P(ReplicatedBuffersTest, ReplicatedModuleRunsEveryReplicaWithTheMastersBuffers) {
  manual_seed(62);
  const std::vector<Device> devices = this->devices();
  auto net = batch_norm_net(devices[0]);
  auto reference = std::static_pointer_cast<nn::Sequential>(net->clone());
  parallel::ReplicatedModule model(net, devices);
  const int64_t rows = 4 * static_cast<int64_t>(devices.size());
  for (int step = 0; step < 3; ++step) {
    const Tensor x = Tensor::randn({rows, 3}, devices[0]) + static_cast<float>(step);
    const std::vector<Tensor> shards = parallel::scatter(x, devices);
    model.forward_replicas(shards);
    (*reference)(shards[0].to(devices[0]));  // the master's statistics are those of replica 0's rows
  }
  const auto master = net->named_buffers();
  const auto expected = reference->named_buffers();
  testing::expect_close(master[0].second, expected[0].second);  // running_mean
  testing::expect_close(master[1].second, expected[1].second);  // running_var
  EXPECT_EQ(master[2].second.item<int64_t>(), 3);               // num_batches_tracked
  // In eval every replica normalizes with the master's running statistics: equal rows give equal outputs.
  net->eval();
  const Tensor row = Tensor::randn({1, 3});
  std::vector<Tensor> inputs;
  for (const Device& device : devices) inputs.push_back(row.to(device));
  const std::vector<Tensor> outputs = model.forward_replicas(inputs);
  for (size_t d = 1; d < devices.size(); ++d) testing::expect_close(outputs[d], outputs[0]);
  for (size_t d = 1; d < devices.size(); ++d)
    testing::expect_close(model.replicas()[d]->buffers()[1], model.replicas()[0]->buffers()[1]);
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE_SET(ReplicatedBuffersTest);

}  // namespace
}  // namespace tandem
