// The replicas' loss weights (Note [Weighting by the seed] in parallel/src/replica_losses.h): a TrainingStep starts
// each replica's backward from its chunk's weight, rows_i / global_rows, so its gradients and its loss are bit for bit
// those of backward over weight * loss; detail::loss_weights puts each weight on its chunk's device; the losses'
// weighting and sum.

#include <memory>
#include <vector>

#include "parallel/parallel_test_helpers.h"
#include "replica_losses.h"
#include "tandem/parallel/training_step.h"
#include "tandem/trainers/models.h"

namespace tandem::testing {
namespace {

std::vector<std::vector<float>> gradient_values_of(const nn::Module& module) {
  std::vector<std::vector<float>> grads;
  for (const Tensor& parameter : module.parameters()) grads.push_back(parameter.grad().to_vector());
  return grads;
}

std::vector<std::vector<float>> parameter_values_of(const nn::Module& module) {
  std::vector<std::vector<float>> values;
  for (const Tensor& parameter : module.parameters()) values.push_back(parameter.to_vector());
  return values;
}

// One step with an SGD of learning rate 0, which leaves the parameters as they are and the step's gradients in place.
TEST(LossWeights, SeededBackwardEqualsBackwardOfTheWeightedLossBitForBit) {
  // 6 rows of a batch of 6 (weight 1: nothing is scaled) and of a batch of 14 (weight 6/14).
  for (const int64_t global_rows : {6, 14}) {
    SCOPED_TRACE("global_rows " + std::to_string(global_rows));
    manual_seed(11);
    const std::shared_ptr<nn::Module> net = trainers::make_mlp(3, 5);
    const std::shared_ptr<nn::Module> reference = net->clone();
    const Tensor x = Tensor::randn({6, 3});
    const Tensor y = Tensor::randn({6, 1});
    parallel::ReplicatedModule model(net, {Device::cpu(0)});
    parallel::ReplicatedSGD sgd(model, {.lr = 0.0});
    parallel::TrainingStep step(model, sgd, nn::mse_loss);
    const Tensor loss = step.step({.features = x, .targets = y, .global_rows = global_rows});

    const float weight = 6.0f / static_cast<float>(global_rows);
    const Tensor expected = nn::mse_loss(reference->forward(x), y) * weight;
    expected.backward();
    EXPECT_EQ(loss.to_vector(), expected.detach().to_vector());
    EXPECT_EQ(gradient_values_of(*model.replicas()[0]), gradient_values_of(*reference));
    EXPECT_EQ(parameter_values_of(*model.replicas()[0]), parameter_values_of(*reference));
  }
}

TEST(LossWeights, AreEachChunksShareOnItsDevice) {
  const std::vector<Tensor> weights =
      parallel::detail::loss_weights({Tensor::zeros({3, 1}, Device::cpu(0)), Tensor::zeros({1, 1}, Device::cpu(1))}, 4);
  ASSERT_EQ(weights.size(), 2u);
  EXPECT_EQ(weights[0].device(), Device::cpu(0));
  EXPECT_EQ(weights[1].device(), Device::cpu(1));
  EXPECT_EQ(weights[0].to_vector(), std::vector<float>{0.75f});
  EXPECT_EQ(weights[1].to_vector(), std::vector<float>{0.25f});
}

// Each loss times its chunk's share (kept as it is where the share is 1), summed on the given device; no losses (a
// process without rows) sum to zero.
TEST(LossWeights, WeightAndSumTheReplicasLosses) {
  const std::vector<Tensor> labels = {Tensor::zeros({3, 1}, Device::cpu(0)), Tensor::zeros({1, 1}, Device::cpu(1))};
  const std::vector<Tensor> losses = {Tensor::scalar(2.0f, Device::cpu(0)), Tensor::scalar(4.0f, Device::cpu(1))};
  const std::vector<Tensor> weighted = parallel::detail::weighted_losses(losses, labels, 4);
  ASSERT_EQ(weighted.size(), 2u);
  EXPECT_EQ(weighted[0].to_vector(), std::vector<float>{1.5f});
  EXPECT_EQ(weighted[1].to_vector(), std::vector<float>{1.0f});
  EXPECT_EQ(weighted[1].device(), Device::cpu(1));
  const std::vector<Tensor> whole = parallel::detail::weighted_losses({losses[0]}, {labels[0]}, 3);
  EXPECT_TRUE(whole[0].is_same(losses[0]));
  const Tensor total = parallel::detail::sum_losses(weighted, Device::cpu(0));
  EXPECT_EQ(total.device(), Device::cpu(0));
  EXPECT_EQ(total.to_vector(), std::vector<float>{2.5f});
  EXPECT_EQ(parallel::detail::sum_losses({}, Device::cpu(1)).to_vector(), std::vector<float>{0.0f});
}

TEST(LossWeights, ForwardBackwardWantsOneSeedPerInput) {
  parallel::ReplicatedModule model(trainers::make_mlp(3, 5), {Device::cpu(0), Device::cpu(1)});
  const auto loss = [](size_t, const Tensor& output) { return sum(output); };
  EXPECT_ERROR(model.forward_backward({Tensor::ones({2, 3}, Device::cpu(0)), Tensor::ones({2, 3}, Device::cpu(1))},
                                      loss, true, parallel::ReplicaThreads::Caller, {Tensor::scalar(1.0f)}),
               "forward_backward: got 1 seeds for 2 inputs but expected one per input (or none)");
}

}  // namespace
}  // namespace tandem::testing
