// Index checks inside captured CUDA graphs (Note [Index checks on the device] in core/src/backend.h): the index ops
// and the class-index targets of cross_entropy run under capture without reading indices back, give the eager values
// on every replay, and a bad index fed to a replay is an Error naming the op, the value and its position at the next
// copy to the host (or the next replay), after which the device goes on; the bad position reads NaN meanwhile.

#include <cmath>
#include <vector>

#include "support/test_support.h"
#include "tandem/core/device_graph.h"

namespace tandem {
namespace {

using testing::kGpu;

// Replays `graph` with `from` copied into its static input `to` first.
void replay_fed(DeviceGraph& graph, const Tensor& from, const Tensor& to) {
  const DeviceGraph::Feed feeds[] = {{from, to}};
  graph.replay(feeds);
}

TEST(CapturedIndexChecksCUDA, IndexSelectReplaysAndReportsABadIndexAtTheNextCopyToTheHost) {
  TANDEM_REQUIRE_GPUS(1);
  const Tensor x = Tensor::from_vector({0.f, 1.f, 10.f, 11.f, 20.f, 21.f, 30.f, 31.f}, {4, 2}, kGpu);
  const Tensor index = Tensor::from_vector(std::vector<int64_t>{3, 0, 2}, {3}, kGpu);
  DeviceGraph graph;
  graph.begin_capture({kGpu});
  EXPECT_TRUE(is_capturing(kGpu));
  const Tensor out = index_select(x, 0, index);
  graph.end_capture();
  EXPECT_FALSE(is_capturing(kGpu));
  EXPECT_FALSE(is_capturing(Device::cpu()));
  graph.replay();
  EXPECT_EQ(out.to_vector(), (std::vector<float>{30, 31, 0, 1, 20, 21}));

  const Tensor bad = Tensor::from_vector(std::vector<int64_t>{1, 9, 2}, {3}, kGpu);
  const Tensor good = Tensor::from_vector(std::vector<int64_t>{2, 1, 0}, {3}, kGpu);
  replay_fed(graph, bad, index);
  EXPECT_ERROR(out.to_vector(),
               "index_select: index 9 at position 1 is out of range for dimension 0 of size 4 (found on cuda:0");
  const std::vector<float> skipped = out.to_vector();  // raised once: the device goes on
  EXPECT_EQ(skipped[0], 10.f);
  EXPECT_TRUE(std::isnan(skipped[2]) && std::isnan(skipped[3]));
  replay_fed(graph, good, index);
  EXPECT_EQ(out.to_vector(), (std::vector<float>{20, 21, 10, 11, 0, 1}));

  // found by a replay the host did not read back: the next replay raises it
  replay_fed(graph, bad, index);
  StreamMarker::record(kGpu).synchronize();
  EXPECT_ERROR(graph.replay(), "index_select: index 9 at position 1");
}

TEST(CapturedIndexChecksCUDA, ScatterAddSkipsABadIndex) {
  TANDEM_REQUIRE_GPUS(1);
  const Tensor x = Tensor::zeros({3}, kGpu);
  const Tensor src = Tensor::from_vector({1.f, 2.f, 4.f}, {3}, kGpu);
  const Tensor index = Tensor::from_vector(std::vector<int64_t>{2, 2, 0}, {3}, kGpu);
  DeviceGraph graph;
  graph.begin_capture({kGpu});
  const Tensor out = scatter_add(x, 0, index, src);
  graph.end_capture();
  graph.replay();
  EXPECT_EQ(out.to_vector(), (std::vector<float>{4, 0, 3}));
  const Tensor bad = Tensor::from_vector(std::vector<int64_t>{-1, 2, 0}, {3}, kGpu);
  replay_fed(graph, bad, index);
  EXPECT_ERROR(out.to_vector(), "scatter_add: index -1 at position 0 is out of range for dimension 0 of size 3");
  EXPECT_EQ(out.to_vector(), (std::vector<float>{4, 0, 2}));
}

TEST(CapturedIndexChecksCUDA, CrossEntropyOfCapturedTargetsEqualsTheEagerLoss) {
  TANDEM_REQUIRE_GPUS(1);
  manual_seed(5);
  const Tensor logits = Tensor::randn({6, 5}, kGpu).set_requires_grad();
  const Tensor target = Tensor::from_vector(std::vector<int64_t>{4, 0, -100, 2, 2, 1}, {6}, kGpu);
  const Tensor weight = Tensor::from_vector({1.f, 2.f, 0.5f, 1.f, 3.f}, {5}, kGpu);
  const nn::CrossEntropyLossOptions options{.weight = weight};
  const Tensor eager = nn::cross_entropy(logits, target, options);
  eager.backward();
  const std::vector<float> eager_grad = logits.grad().to_vector();
  logits.set_grad(Tensor());

  DeviceGraph graph;
  graph.begin_capture({kGpu});
  const Tensor loss = nn::cross_entropy(logits, target, options);
  loss.backward();
  graph.end_capture();
  for (int replay = 0; replay < 2; ++replay) {
    logits.grad().zero_();
    graph.replay();
    EXPECT_FLOAT_EQ(loss.item<float>(), eager.item<float>());
    const std::vector<float> grad = logits.grad().to_vector();
    for (size_t i = 0; i < grad.size(); ++i) EXPECT_NEAR(grad[i], eager_grad[i], 1e-6) << i;
  }
  const Tensor bad = Tensor::from_vector(std::vector<int64_t>{4, 0, 7, 2, 2, 1}, {6}, kGpu);
  replay_fed(graph, bad, target);
  EXPECT_ERROR(loss.item<float>(), "nn::cross_entropy: index 7 at position 2 is out of range for 5 classes");
}

}  // namespace
}  // namespace tandem
