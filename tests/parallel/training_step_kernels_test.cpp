// How many kernels a captured training step of the seed net launches on one GPU (trainers::make_mlp(10, 20):
// Linear(10, 20) -> Linear(20, 1), batch 4096, MSE, SGD with momentum), so that a regression fails: a product that
// adds split-K parts in a kernel of its own, a gradient computed into a temporary and copied into the flat gradient
// buffer, a two-pass loss. The captured step must still equal the eager one, and both the CPU's.

#include <cmath>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "parallel/parallel_test_helpers.h"
#include "tandem/parallel/training_step.h"
#include "tandem/trainers/models.h"

namespace tandem::testing {
namespace {

// One kernel each for the two forward products (bias in the epilogue, no split-K), the loss (one block), the loss's
// backward and the optimizer step (multi-tensor SGD); one for each weight gradient with its bias gradient, both
// written straight into the flat gradient buffer (a tiny output over k = the batch: Note [Tiny products] in
// core/src/cuda/small_products.h), the output layer's together with the hidden layer's input gradient (Note [Paired
// small products] there).
constexpr size_t kMaxSeedStepKernels = 7;
constexpr int64_t kBatch = 4096;
constexpr int kSteps = 5;  // two eager warm-up steps, the captured one, two replays

struct SeedRun {
  std::shared_ptr<nn::Module> net;
  std::vector<float> losses;
};

// kSteps eager steps (a TrainingStep with capture off) of the seed net on `device`, from the start the captured run
// takes.
SeedRun run_eagerly(Device device) {
  manual_seed(0);
  SeedRun run{trainers::make_mlp(10, 20), {}};
  run.net->to(device);
  parallel::ReplicatedModule model(run.net, {device});
  parallel::ReplicatedSGD sgd(model, {.lr = 0.01, .momentum = 0.9});
  parallel::TrainingStep eager(model, sgd, nn::mse_loss, {.capture = false});
  for (int i = 0; i < kSteps; ++i) {
    const Tensor loss = eager.step({.features = seeded_randn({kBatch, 10}, device, 100 + i),
                                    .targets = seeded_randn({kBatch, 1}, device, 900 + i)});
    run.losses.push_back(loss.item<float>());
  }
  return run;
}

TEST(TrainingStepKernels, SeedNetStepOnOneGpuTakesFewKernelsAndEqualsTheEagerStep_CUDA) {
  TANDEM_REQUIRE_GPUS(1);
  const Device gpu = Device::cuda(0);
  manual_seed(0);
  const std::shared_ptr<nn::Module> net = trainers::make_mlp(10, 20);
  net->to(gpu);
  parallel::ReplicatedModule model(net, {gpu});
  parallel::ReplicatedSGD sgd(model, {.lr = 0.01, .momentum = 0.9});
  parallel::TrainingStep captured(model, sgd, nn::mse_loss);
  std::vector<float> losses;
  size_t kernels = 0;
  std::string graph_text;
  for (int i = 0; i < kSteps; ++i) {
    const Tensor loss = captured.step(
        {.features = seeded_randn({kBatch, 10}, gpu, 100 + i), .targets = seeded_randn({kBatch, 1}, gpu, 900 + i)});
    losses.push_back(loss.item<float>());
    if (i >= 2) ASSERT_TRUE(captured.captured()) << "step " << i << ": " << captured.fallback_reason();
    if (i == kSteps - 1) {
      ASSERT_NE(captured.last_graph(), nullptr);
      kernels = captured.last_graph()->kernel_nodes();
      const std::string dot = testing::scratch_path("seed_step.dot");
      captured.last_graph()->debug_dump(dot);
      graph_text = file_text(dot);
      std::remove(dot.c_str());
    }
  }
  RecordProperty("kernels", static_cast<int>(kernels));
  EXPECT_LE(kernels, kMaxSeedStepKernels) << "the captured seed step launches " << kernels << " kernels";
  EXPECT_GT(kernels, 0u);
  ASSERT_FALSE(graph_text.empty()) << "debug_dump wrote nothing";
  EXPECT_EQ(graph_text.find("MEM_ALLOC"), std::string::npos) << "the step allocates a temporary in the graph";

  const SeedRun eager = run_eagerly(gpu);
  const SeedRun cpu = run_eagerly(Device::cpu());
  ASSERT_EQ(eager.losses.size(), losses.size());
  for (size_t i = 0; i < losses.size(); ++i) {
    EXPECT_NEAR(losses[i], eager.losses[i], 1e-6 * std::abs(eager.losses[i]) + 1e-7) << "step " << i;
    EXPECT_NEAR(losses[i], cpu.losses[i], 1e-4 * std::abs(cpu.losses[i]) + 1e-6) << "step " << i;
  }
  expect_parameters_close(*net, *eager.net, 1e-6, 1e-7);
  expect_parameters_close(*net, *cpu.net, 1e-4, 1e-5);
}

}  // namespace
}  // namespace tandem::testing
