// Dependent launches (Note [Dependent launches] in core/src/cuda/launch.cuh): with them on, every kernel still sees
// everything its predecessors wrote, eagerly and in a replayed CUDA graph, and turning them off changes no bit.

#include <cstdint>
#include <vector>

#include "support/test_support.h"
#include "tandem/core/device_graph.h"
#include "tandem/core/launch_settings.h"

namespace tandem {
namespace {

using testing::kGpu;

using DependentLaunches = testing::ScopedSwitch<dependent_launches, set_dependent_launches>;

// Each round adds one to every element, takes the mean (one block up to 65536 elements, two passes above), and
// spreads it over a vector made by another kernel: every kernel reads what the one or two before it wrote. The
// values are small integers and the lengths powers of two, so every sum is exact: a kernel that read before its
// producer had finished would leave a wrong element.
Tensor count_up(Tensor x, int rounds) {
  for (int r = 0; r < rounds; ++r) {
    x = x + 1.0f;
    const Tensor m = mean(x);
    x = x * 0.0f + m;
  }
  return x;
}

void expect_all_equal(const Tensor& x, float value) {
  const std::vector<float> values = x.to_vector();
  int64_t wrong = 0;
  for (float v : values) wrong += v != value ? 1 : 0;
  EXPECT_EQ(wrong, 0) << "of " << values.size() << " elements, expected all " << value << "; element 0 is "
                      << values.front();
}

TEST(DependentLaunchCUDA, ChainsOfSmallKernelsSeeTheirPredecessorsWrites) {
  TANDEM_REQUIRE_GPUS(1);
  DependentLaunches on(true);
  for (const int64_t n : {int64_t{4096}, int64_t{1} << 20}) {
    SCOPED_TRACE(n);
    expect_all_equal(count_up(Tensor::zeros({n}, kGpu), 300), 300.0f);
  }
}

// The input is made without a kernel, so when this test runs in a process of its own (as ctest runs it) the first
// kernel of the process, and with it the per-device capability query, happens inside the capture.
TEST(DependentLaunchCUDA, ReplayedChainsSeeTheirPredecessorsWrites) {
  TANDEM_REQUIRE_GPUS(1);
  DependentLaunches on(true);
  const Tensor input = Tensor::empty({4096}, kGpu);
  DeviceGraph graph;
  graph.begin_capture({kGpu});
  const Tensor output = count_up(input, 100);
  graph.end_capture();
  for (const float start : {0.0f, 7.0f, 7.0f}) {
    const Tensor fed = Tensor::full({4096}, start, Device::cpu());
    const DeviceGraph::Feed feeds[] = {{.from = fed, .to = input}};
    graph.replay(feeds);
    expect_all_equal(output, start + 100.0f);
  }
}

// A small network's forward and backward kernels (products, bias and loss reductions, elementwise backward) give
// the same bits with dependent launches on and off.
TEST(DependentLaunchCUDA, TurningThemOffChangesNoBit) {
  TANDEM_REQUIRE_GPUS(1);
  const Tensor x = Tensor::randn({512, 10}).to(kGpu);
  const Tensor y = Tensor::randn({512, 1}).to(kGpu);
  const Tensor w1 = Tensor::randn({20, 10}).to(kGpu);
  const Tensor b1 = Tensor::randn({20}).to(kGpu);
  const Tensor w2 = Tensor::randn({1, 20}).to(kGpu);
  const auto step = [&](bool enabled) {
    DependentLaunches setting(enabled);
    EXPECT_EQ(dependent_launches(), enabled);
    Tensor a = w1.clone().set_requires_grad(true);
    Tensor b = b1.clone().set_requires_grad(true);
    Tensor c = w2.clone().set_requires_grad(true);
    Tensor loss = mse_loss(matmul(tanh(linear(x, a, b)), c.t()), y);
    loss.backward();
    std::vector<float> bits = loss.to_vector();
    for (const Tensor& t : {a.grad(), b.grad(), c.grad(), sum(a.grad() * a.grad(), 1)}) {
      const std::vector<float> v = t.to_vector();
      bits.insert(bits.end(), v.begin(), v.end());
    }
    return bits;
  };
  const std::vector<float> with = step(true);
  const std::vector<float> without = step(false);
  ASSERT_EQ(with.size(), without.size());
  for (size_t i = 0; i < with.size(); ++i) EXPECT_EQ(with[i], without[i]) << "value " << i;
}

}  // namespace
}  // namespace tandem
