// parallel::convert_sync_batchnorm in one process: over a group of one process a converted batch norm equals the
// plain one (outputs, gradients, running statistics, eval); the conversion keeps the model's types, names and
// tensors; setups it does not support are refused.
#include "support/test_support.h"

namespace tandem {
namespace {

using testing::expect_close;

// Out, input gradient and parameter gradients of one training forward and backward of `bn` on `x`, with the loss
// sum(out * probe) (a probe that is not constant, so that every gradient term matters).
struct BatchNormRun {
  Tensor out, input_grad, weight_grad, bias_grad;
};

BatchNormRun run_training(nn::Module& bn, const Tensor& x, const Tensor& probe) {
  Tensor input = x.clone();
  input.set_requires_grad(true);
  const Tensor out = bn.forward(input);
  sum(out * probe).backward();
  const auto parameters = bn.parameters();
  return {out.detach(), input.grad(), parameters[0].grad(), parameters[1].grad()};
}

TEST(SyncBatchNorm, OverAGroupOfOneProcessEqualsBatchNorm2d) {
  manual_seed(3);
  auto reference = std::make_shared<nn::BatchNorm2d>(3, 1e-5, 0.1);
  {
    NoGradGuard no_grad;
    reference->weight.copy_(Tensor::uniform({3}, 0.5f, 1.5f));
    reference->bias.copy_(Tensor::uniform({3}, -0.5f, 0.5f));
  }
  auto synced = std::static_pointer_cast<nn::BatchNorm2d>(reference->clone());
  auto group = comm::ProcessGroup::single({Device::cpu()});
  parallel::convert_sync_batchnorm(synced, group);
  ASSERT_NE(synced->statistics_sync(), nullptr);

  for (int step = 0; step < 2; ++step) {
    const Tensor x = Tensor::randn({4, 3, 5, 2}) * 2.0f + 1.0f;
    const Tensor probe = Tensor::randn({4, 3, 5, 2});
    const BatchNormRun expected = run_training(*reference, x, probe);
    const BatchNormRun actual = run_training(*synced, x, probe);
    expect_close(actual.out, expected.out, 1e-5, 1e-5);
    expect_close(actual.input_grad, expected.input_grad, 1e-5, 1e-5);
    expect_close(actual.weight_grad, expected.weight_grad, 1e-5, 1e-5);
    expect_close(actual.bias_grad, expected.bias_grad, 1e-5, 1e-5);
    reference->zero_grad();
    synced->zero_grad();
  }
  expect_close(synced->running_mean, reference->running_mean, 1e-5, 1e-6);
  expect_close(synced->running_var, reference->running_var, 1e-5, 1e-6);
  EXPECT_EQ(synced->num_batches_tracked.item<int64_t>(), 2);

  reference->eval();
  synced->eval();
  const Tensor x = Tensor::randn({2, 3, 4, 4});
  expect_close(synced->forward(x), reference->forward(x), 1e-6, 1e-6);
}

TEST(SyncBatchNorm, ConversionKeepsTypesNamesAndTensors) {
  manual_seed(4);
  auto inner = std::make_shared<nn::Sequential>(nn::Linear(4, 3), nn::BatchNorm1d(3));
  auto net = std::make_shared<nn::Sequential>(nn::Linear(5, 4), nn::BatchNorm1d(4), inner);
  const auto parameters = net->named_parameters();
  const auto buffers = net->named_buffers();
  auto group = comm::ProcessGroup::single({Device::cpu()});
  EXPECT_EQ(parallel::convert_sync_batchnorm(net, group), net);
  EXPECT_EQ(parallel::SyncBatchNorm::convert_sync_batchnorm(net, group), net);  // PyTorch's spelling, the same call

  const auto converted_parameters = net->named_parameters();
  ASSERT_EQ(converted_parameters.size(), parameters.size());
  for (size_t i = 0; i < parameters.size(); ++i) {
    EXPECT_EQ(converted_parameters[i].first, parameters[i].first);
    EXPECT_TRUE(converted_parameters[i].second.is_same(parameters[i].second)) << parameters[i].first;
  }
  const auto converted_buffers = net->named_buffers();
  ASSERT_EQ(converted_buffers.size(), buffers.size());
  for (size_t i = 0; i < buffers.size(); ++i) {
    EXPECT_EQ(converted_buffers[i].first, buffers[i].first);
    EXPECT_TRUE(converted_buffers[i].second.is_same(buffers[i].second)) << buffers[i].first;
  }
  EXPECT_NE(std::dynamic_pointer_cast<nn::BatchNorm1d>(net->children()[1])->statistics_sync(), nullptr);
  EXPECT_NE(std::dynamic_pointer_cast<nn::BatchNorm1d>(inner->children()[1])->statistics_sync(), nullptr);
  // Copies share the sync (a clone, or a replica, is synchronized too).
  auto copy = std::dynamic_pointer_cast<nn::Sequential>(net->clone());
  EXPECT_NE(std::dynamic_pointer_cast<nn::BatchNorm1d>(copy->children()[1])->statistics_sync(), nullptr);
}

TEST(SyncBatchNorm, UnsupportedSetupsAreErrors) {
  EXPECT_ERROR(parallel::convert_sync_batchnorm(nullptr, comm::ProcessGroup::single({Device::cpu()})),
               "module is null");
  EXPECT_ERROR(parallel::convert_sync_batchnorm(std::make_shared<nn::BatchNorm1d>(2), nullptr), "group is null");
  {
    auto group = comm::ProcessGroup::single({Device::cpu(0), Device::cpu(1)});
    EXPECT_ERROR(parallel::convert_sync_batchnorm(std::make_shared<nn::BatchNorm1d>(2), group),
                 "the group has 2 devices per process, but synchronized batch norm supports one device per process");
  }
  // Replicas on several devices of one process: the replica off the group's device refuses to normalize.
  auto net = std::make_shared<nn::Sequential>(nn::Linear(3, 2), nn::BatchNorm1d(2));
  auto group = comm::ProcessGroup::single({Device::cpu(0)});
  parallel::convert_sync_batchnorm(net, group);
  parallel::ReplicatedModule replicated(net, {Device::cpu(0), Device::cpu(1)});
  EXPECT_ERROR(replicated.forward(Tensor::randn({6, 3})), "replicas on several devices per process are not supported");
}

}  // namespace
}  // namespace tandem
