// Shared parameters (Note [Shared parameters] in nn/module.h) under data parallelism: every replica keeps the tie,
// the master's gradient sums both uses on every replica, the gradient layout and the reduction see the shared
// weight once, and N devices train it as one device does.
#include "parallel/distributed_test_helpers.h"
#include "support/tied_net.h"

namespace tandem::testing {
namespace {

const std::vector<Device> kTwoCpus = {Device::cpu(0), Device::cpu(1)};
constexpr optim::SGDOptions kSgd{.lr = 0.05, .momentum = 0.9};

bool replica_tied(const nn::Module& replica) {
  const auto& net = dynamic_cast<const TiedNet&>(replica);
  return net.decoder->weight.is_same(net.encoder->weight);
}

TEST(SharedParametersParallel, ReplicateKeepsTheTieAndTheMasterSumsBothUsesOfEveryReplica) {
  auto net = make_tied_net(Device::cpu(0), 1);
  const Tensor x = seeded_randn({8, 10}, Device::cpu(0), 2);
  const Tensor y = seeded_randn({8, 1}, Device::cpu(0), 3);

  const auto replicas = parallel::replicate(net, kTwoCpus);  // typed: shared_ptr<TiedNet>
  ASSERT_EQ(replicas.size(), 2u);
  Tensor loss;
  for (size_t d = 0; d < replicas.size(); ++d) {
    SCOPED_TRACE("replica " + std::to_string(d));
    EXPECT_TRUE(replica_tied(*replicas[d]));
    ASSERT_EQ(replicas[d]->parameters().size(), 5u);
    EXPECT_EQ(replicas[d]->device(), kTwoCpus[d]);
    const auto rows = static_cast<int64_t>(4 * d);
    const Tensor half =
        nn::mse_loss((*replicas[d])(x.narrow(0, rows, 4).to(kTwoCpus[d])), y.narrow(0, rows, 4).to(kTwoCpus[d])) * 0.5f;
    loss = d == 0 ? half : loss + half.to(Device::cpu(0));
  }
  loss.backward();

  auto reference = std::static_pointer_cast<TiedNet>(net->clone());
  nn::mse_loss((*reference)(x), y).backward();
  expect_gradients_close(*net, gradients_of(*reference), 1e-5, 1e-7);
}

// One data_parallel step with SGD, and the same step on one device.
TEST(SharedParametersParallel, ADataParallelStepEqualsOneDevice) {
  auto net = make_tied_net(Device::cpu(0), 4);
  auto reference = std::static_pointer_cast<TiedNet>(net->clone());
  optim::SGD sgd(net->parameters(), kSgd);
  optim::SGD expected(reference->parameters(), kSgd);
  for (size_t step = 0; step < 3; ++step) {
    const DistributedBatch b = distributed_batch(step);
    sgd.zero_grad();
    nn::mse_loss(parallel::data_parallel(net, b.x, {Device::cpu(0), Device::cpu(1), Device::cpu(2)}), b.y).backward();
    sgd.step();
    expected.zero_grad();
    nn::mse_loss((*reference)(b.x), b.y).backward();
    expected.step();
  }
  expect_parameters_close(*net, *reference, 1e-5, 1e-6);
  EXPECT_TRUE(net->decoder->weight.is_same(net->encoder->weight));
}

// The shared weight has one place in the flat gradient buffers: 5 parameters, 10 * 10 + 10 + 10 + 10 + 1 elements.
void expect_one_place_for_the_shared_weight(const parallel::GradientLayout& layout) {
  EXPECT_EQ(layout.parameter_count(), 5u);
  EXPECT_EQ(layout.numel(), 131);
  size_t placed = 0;
  for (const parallel::GradientLayout::Bucket& bucket : layout.buckets()) placed += bucket.parameters;
  EXPECT_EQ(placed, 5u);
  EXPECT_EQ(layout.name(0), "encoder.weight");
}

TEST(SharedParametersParallel, ReplicatedModuleTrainsATiedNetAsOneDevice) {
  auto net = make_tied_net(Device::cpu(0), 5);
  auto reference = std::static_pointer_cast<TiedNet>(net->clone());
  auto model = std::make_shared<parallel::ReplicatedModule>(net, virtual_devices(3),
                                                            parallel::ReplicatedOptions{.bucket_size = 128});
  expect_one_place_for_the_shared_weight(model->gradient_layout());
  for (const auto& replica : model->replicas()) EXPECT_TRUE(replica_tied(*replica));

  optim::SGD sgd(model->parameters(), kSgd);
  optim::SGD expected(reference->parameters(), kSgd);
  for (size_t step = 0; step < 10; ++step) {
    const DistributedBatch b = distributed_batch(step);
    sgd.zero_grad();
    nn::mse_loss((*model)(b.x), b.y).backward();
    sgd.step();
    expected.zero_grad();
    nn::mse_loss((*reference)(b.x), b.y).backward();
    expected.step();
  }
  expect_parameters_close(*net, *reference, 1e-5, 1e-6);
  EXPECT_TRUE(net->decoder->weight.is_same(net->encoder->weight));
}

TEST(SharedParametersParallel, DistributedDataParallelReducesATiedWeightOnce) {
  auto net = make_tied_net(Device::cpu(0), 6);
  auto reference = std::static_pointer_cast<TiedNet>(net->clone());
  auto ddp = std::make_shared<parallel::DistributedDataParallel>(net, comm::ProcessGroup::single(kTwoCpus),
                                                                 parallel::DistributedOptions{.bucket_size = 128});
  expect_one_place_for_the_shared_weight(ddp->replicated().gradient_layout());
  EXPECT_EQ(ddp->parameters().size(), 5u);

  constexpr optim::AdamWOptions kAdamW{.lr = 0.005, .weight_decay = 0.01};
  optim::AdamW adamw(ddp->parameters(), kAdamW);
  optim::AdamW expected(reference->parameters(), kAdamW);
  for (size_t step = 0; step < 10; ++step) {
    const DistributedBatch b = distributed_batch(step);
    adamw.zero_grad();
    nn::mse_loss((*ddp)(b.x), b.y).backward();
    adamw.step();
    expected.zero_grad();
    nn::mse_loss((*reference)(b.x), b.y).backward();
    expected.step();
  }
  expect_parameters_close(*net, *reference, 1e-5, 1e-6);
  for (const auto& replica : ddp->replicated().replicas()) EXPECT_TRUE(replica_tied(*replica));
}

TEST(SharedParametersParallel, AGradientLayoutRefusesOneTensorListedTwice) {
  const Tensor weight = Tensor::ones({2, 2}).set_requires_grad();
  EXPECT_ERROR(parallel::GradientLayout({{"encoder.weight", weight}, {"decoder.weight", weight}}, 1024),
               "parallel::GradientLayout: parameters 'encoder.weight' and 'decoder.weight' are one tensor, but each "
               "parameter must be listed once");
}

}  // namespace
}  // namespace tandem::testing
