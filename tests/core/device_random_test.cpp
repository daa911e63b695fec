// Uniform draws made by a GPU kernel (Note [Random draws in captured graphs] in tandem/core/random.h): bitwise the
// host's values at the same stream and counter, eagerly and in the replays of a captured graph, with the generator's
// counters moving as the eager draws move them; and the host rule they match, which CI checks without a GPU.

#include <cstdint>
#include <cstring>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "support/test_support.h"
#include "tandem/core/device_graph.h"

namespace tandem {
namespace {

using testing::kGpu;

uint32_t bits_of(float value) {
  uint32_t bits = 0;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}

// "" when `actual` holds bitwise `expected`'s values; else the count of differences and the first few, with their
// bits, so that a failure on a GPU machine says what went wrong without a rerun.
std::string bitwise_differences(const std::vector<float>& actual, const std::vector<float>& expected) {
  std::ostringstream out;
  if (actual.size() != expected.size()) {
    out << actual.size() << " values but expected " << expected.size();
    return out.str();
  }
  size_t differ = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (bits_of(actual[i]) == bits_of(expected[i])) continue;
    if (differ < 5) {
      out << " [" << i << "] " << actual[i] << " (0x" << std::hex << bits_of(actual[i]) << ") vs " << expected[i]
          << " (0x" << bits_of(expected[i]) << std::dec << ");";
    }
    ++differ;
  }
  if (differ == 0) return "";
  return std::to_string(differ) + " of " + std::to_string(actual.size()) + " values differ:" + out.str();
}

#define EXPECT_BITWISE_EQ(actual, expected) EXPECT_EQ(bitwise_differences((actual), (expected)), "")

std::string describe(const GeneratorState& state) {
  std::ostringstream out;
  out << "seed " << state.seed << ", default counter " << state.counter;
  for (const auto& [device, counter] : state.device_counters) out << ", " << device << " " << counter;
  return out.str();
}

#define EXPECT_STATE_EQ(actual, expected) EXPECT_EQ(describe(actual), describe(expected))

// One draw, on `device` from the stream that `stream` names (none: the default stream).
struct Draw {
  Shape shape;
  float low = 0.0f, high = 1.0f;
  std::optional<Device> stream;
};

Tensor draw(const Draw& what, Device device) {
  std::optional<GeneratorStreamGuard> guard;
  if (what.stream) guard.emplace(*what.stream);
  return what.low == 0.0f && what.high == 1.0f ? Tensor::rand(what.shape, device)
                                               : Tensor::uniform(what.shape, what.low, what.high, device);
}

// Odd sizes (not multiples of a block, a grid-stride loop's wrap), bounds whose float64 product and sum round (and
// one so narrow that values round up to `high`, which must become the float below it), and draws from the default
// stream and from device streams, a GPU's and a CPU device's (the thread picks the stream, not the tensor's device).
const std::vector<Draw> kDraws = {
    {.shape = {1}},
    {.shape = {7, 13}},
    {.shape = {100003}},
    {.shape = {3, 333}, .stream = Device::cuda(0)},
    {.shape = {1025}, .low = -2.5f, .high = 3.7f},
    {.shape = {4097}, .low = 1.0f, .high = 1.0000001f, .stream = Device::cpu(3)},
    {.shape = {257}, .low = -1e-3f, .high = 7e5f, .stream = Device::cuda(0)},
    {.shape = {0}, .stream = Device::cuda(1)},
};

// The host rule that the GPU kernel must match, pinned to the stream's values: rand's value i is the top 24 bits of
// stream value i scaled to [0, 1), and uniform's is low + (high - low) * that in float64, rounded to float32.
TEST(DeviceRandom, HostValuesAreTheStreamsTop24Bits) {
  manual_seed(2024);
  const std::vector<float> unit = Tensor::rand({1000}).to_vector();
  const std::vector<float> wide = Tensor::uniform({1000}, -2.5f, 3.7f).to_vector();
  for (uint64_t i = 0; i < 1000; ++i) {
    const double u = static_cast<double>(splitmix64(2024, i) >> 40) * 0x1.0p-24;
    ASSERT_EQ(unit[i], static_cast<float>(u)) << i;
    const double v = static_cast<double>(splitmix64(2024, 1000 + i) >> 40) * 0x1.0p-24;
    ASSERT_EQ(wide[i], static_cast<float>(-2.5 + (3.7f - -2.5) * v)) << i;
  }
}

TEST(DeviceRandomCUDA, RandEqualsTheHostDrawBitwise) {
  TANDEM_REQUIRE_GPUS(1);
  manual_seed(2024);
  std::vector<std::vector<float>> host;
  for (const Draw& what : kDraws) host.push_back(draw(what, Device::cpu(0)).to_vector());
  const GeneratorState host_state = generator_state();
  const std::vector<float> host_next = Tensor::rand({9}).to_vector();

  manual_seed(2024);
  for (size_t i = 0; i < kDraws.size(); ++i) {
    SCOPED_TRACE(::testing::Message() << "draw " << i);
    const Tensor gpu = draw(kDraws[i], kGpu);
    EXPECT_EQ(gpu.device(), kGpu);
    EXPECT_EQ(gpu.shape(), kDraws[i].shape);
    EXPECT_BITWISE_EQ(gpu.to_vector(), host[i]);
  }
  EXPECT_STATE_EQ(generator_state(), host_state);  // the counters moved as the host draws moved them
  EXPECT_BITWISE_EQ(Tensor::rand({9}, kGpu).to_vector(), host_next);
  // The narrow draw's values all round to `high` or below it, and stay below: [1, 1 + 2^-23) holds one float.
  EXPECT_EQ(host[5], std::vector<float>(host[5].size(), 1.0f));
}

// Three eager draws per "step" on the GPU, against a graph that captured one step and is replayed three times.
std::vector<Tensor> eager_step(Device device) {
  std::vector<Tensor> drawn;
  for (const Draw& what : {kDraws[2], kDraws[3], kDraws[4]}) drawn.push_back(draw(what, device));
  return drawn;
}

TEST(DeviceRandomCUDA, ReplaysDrawWhatEagerDrawsWould) {
  TANDEM_REQUIRE_GPUS(1);
  manual_seed(99);
  std::vector<std::vector<std::vector<float>>> eager;  // [step][draw]
  std::vector<GeneratorState> eager_states;
  for (int step = 0; step < 3; ++step) {
    std::vector<std::vector<float>> values;
    for (const Tensor& t : eager_step(kGpu)) values.push_back(t.to_vector());
    eager.push_back(values);
    eager_states.push_back(generator_state());
  }
  ASSERT_NE(eager[0], eager[1]);

  manual_seed(99);
  const GeneratorState start = generator_state();
  DeviceGraph graph;
  graph.begin_capture({kGpu});
  const std::vector<Tensor> replayed = eager_step(kGpu);
  graph.end_capture();
  EXPECT_STATE_EQ(generator_state(), start);  // the capture drew nothing
  for (int step = 0; step < 3; ++step) {
    SCOPED_TRACE(::testing::Message() << "replay " << step);
    graph.replay();
    for (size_t i = 0; i < replayed.size(); ++i) EXPECT_BITWISE_EQ(replayed[i].to_vector(), eager[step][i]) << i;
    EXPECT_STATE_EQ(generator_state(), eager_states[step]);
  }
}

// The host's counters stay the one truth between replays: an eager draw moves the next replay on, manual_seed
// rewinds it (the key is uploaded too), and a restored state repeats a replay's values (checkpoints resume exactly).
TEST(DeviceRandomCUDA, ReplaysFollowTheHostStateBetweenReplays) {
  TANDEM_REQUIRE_GPUS(1);
  const Draw what{.shape = {5000}, .stream = Device::cuda(0)};
  const Draw between{.shape = {77}, .stream = Device::cuda(0)};
  manual_seed(5);
  std::vector<std::vector<float>> expected = {draw(what, kGpu).to_vector()};
  draw(between, kGpu);
  expected.push_back(draw(what, kGpu).to_vector());

  manual_seed(5);
  DeviceGraph graph;
  graph.begin_capture({kGpu});
  const Tensor replayed = draw(what, kGpu);
  graph.end_capture();
  graph.replay();
  EXPECT_BITWISE_EQ(replayed.to_vector(), expected[0]);
  draw(between, kGpu);  // eagerly, between two replays
  const GeneratorState before_second = generator_state();
  graph.replay();
  EXPECT_BITWISE_EQ(replayed.to_vector(), expected[1]);
  const GeneratorState after_second = generator_state();

  set_generator_state(before_second);
  graph.replay();
  EXPECT_BITWISE_EQ(replayed.to_vector(), expected[1]);
  EXPECT_STATE_EQ(generator_state(), after_second);

  manual_seed(6);
  graph.replay();
  manual_seed(6);
  EXPECT_BITWISE_EQ(replayed.to_vector(), draw(what, kGpu).to_vector());
}

// Draws made on the host cannot be recorded: they throw for a GPU whose stream is captured, drawing nothing, and the
// capture can still be ended cleanly.
TEST(DeviceRandomCUDA, HostDrawsThrowWhileCapturing) {
  TANDEM_REQUIRE_GPUS(1);
  manual_seed(3);
  const GeneratorState start = generator_state();
  DeviceGraph graph;
  graph.begin_capture({kGpu});
  EXPECT_ERROR(Tensor::randn({4}, kGpu),
               "Tensor::randn: draws its values on the host and copies them to cuda:0, whose stream is being captured");
  EXPECT_ERROR(Tensor::randint(0, 5, {4}, kGpu), "Tensor::randint: draws its values on the host");
  graph.abort_capture();
  EXPECT_STATE_EQ(generator_state(), start);
  const std::vector<float> on_gpu = Tensor::randn({4}, kGpu).to_vector();
  manual_seed(3);
  EXPECT_EQ(on_gpu, Tensor::randn({4}).to_vector());  // the failed draws drew nothing
}

}  // namespace
}  // namespace tandem
