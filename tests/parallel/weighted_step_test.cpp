// parallel::weighted_forward_backward starts each replica's backward from its weight (Note [Weighting by the seed] in
// weighted_step.cpp): gradients and returned losses are bit for bit those of backward over weight * loss.

#include "tandem/parallel/weighted_step.h"

#include <memory>
#include <vector>

#include "parallel/parallel_test_helpers.h"
#include "tandem/trainers/models.h"

namespace tandem::testing {
namespace {

std::vector<std::vector<float>> gradient_values_of(const nn::Module& module) {
  std::vector<std::vector<float>> grads;
  for (const Tensor& parameter : module.parameters()) grads.push_back(parameter.grad().to_vector());
  return grads;
}

TEST(WeightedStep, SeededBackwardEqualsBackwardOfTheWeightedLossBitForBit) {
  // 6 rows of a batch of 6 (weight 1: nothing is scaled) and of a batch of 14 (weight 6/14).
  for (const int64_t global_rows : {6, 14}) {
    manual_seed(11);
    const std::shared_ptr<nn::Module> net = trainers::make_mlp(3, 5);
    const std::shared_ptr<nn::Module> reference = net->clone();
    const Tensor x = Tensor::randn({6, 3});
    const Tensor y = Tensor::randn({6, 1});
    parallel::ReplicatedModule model(net, {Device::cpu(0)});
    const std::vector<Tensor> losses = parallel::weighted_forward_backward(model, {x}, {y}, global_rows, nn::mse_loss);

    const float weight = 6.0f / static_cast<float>(global_rows);
    const Tensor expected = nn::mse_loss(reference->forward(x), y) * weight;
    expected.backward();
    ASSERT_EQ(losses.size(), 1u);
    EXPECT_EQ(losses[0].to_vector(), expected.detach().to_vector()) << "global_rows " << global_rows;
    EXPECT_EQ(gradient_values_of(*model.replicas()[0]), gradient_values_of(*reference))
        << "global_rows " << global_rows;
  }
}

TEST(WeightedStep, LossWeightsAreEachChunksShareOnItsDevice) {
  const std::vector<Tensor> weights =
      parallel::loss_weights({Tensor::zeros({3, 1}, Device::cpu(0)), Tensor::zeros({1, 1}, Device::cpu(1))}, 4);
  ASSERT_EQ(weights.size(), 2u);
  EXPECT_EQ(weights[0].device(), Device::cpu(0));
  EXPECT_EQ(weights[1].device(), Device::cpu(1));
  EXPECT_EQ(weights[0].to_vector(), std::vector<float>{0.75f});
  EXPECT_EQ(weights[1].to_vector(), std::vector<float>{0.25f});
}

TEST(WeightedStep, ForwardBackwardWantsOneSeedPerInput) {
  parallel::ReplicatedModule model(trainers::make_mlp(3, 5), {Device::cpu(0), Device::cpu(1)});
  const auto loss = [](size_t, const Tensor& output) { return sum(output); };
  EXPECT_ERROR(model.forward_backward({Tensor::ones({2, 3}, Device::cpu(0)), Tensor::ones({2, 3}, Device::cpu(1))},
                                      loss, true, parallel::ReplicaThreads::Caller, {Tensor::scalar(1.0f)}),
               "forward_backward: got 1 seeds for 2 inputs but expected one per input (or none)");
}

}  // namespace
}  // namespace tandem::testing
