#include "support/test_support.h"

#include <cmath>
#include <map>
#include <optional>
#include <thread>

namespace tandem {
namespace {

TEST(Random, SameSeedSameValuesOnEveryDevice) {
  manual_seed(42);
  const std::vector<float> cpu0 = Tensor::randn({100}).to_vector();
  manual_seed(42);
  const std::vector<float> cpu1 = Tensor::randn({100}, Device::cpu(1)).to_vector();
  EXPECT_EQ(cpu0, cpu1);
  if (cuda_device_count() > 0) {
    manual_seed(42);
    EXPECT_EQ(Tensor::randn({100}, Device::cuda(0)).to_vector(), cpu0);
  }
  manual_seed(43);
  EXPECT_NE(Tensor::randn({100}).to_vector(), cpu0);
}

TEST(Random, StateRestoresTheStream) {
  manual_seed(7);
  Tensor::rand({10});
  const GeneratorState state = generator_state();
  const std::vector<float> next = Tensor::rand({5}).to_vector();
  set_generator_state(state);
  EXPECT_EQ(Tensor::rand({5}).to_vector(), next);
}

TEST(Random, Distributions) {
  manual_seed(3);
  const std::vector<float> u = Tensor::uniform({100000}, -2.0f, 3.0f).to_vector();
  double mean = 0;
  for (float v : u) {
    ASSERT_GE(v, -2.0f);
    ASSERT_LT(v, 3.0f);
    mean += v;
  }
  EXPECT_NEAR(mean / u.size(), 0.5, 0.02);
  const std::vector<float> n = Tensor::randn({100000}).to_vector();
  double m = 0, m2 = 0;
  for (float v : n) {
    m += v;
    m2 += static_cast<double>(v) * v;
  }
  m /= n.size();
  EXPECT_NEAR(m, 0.0, 0.02);
  EXPECT_NEAR(m2 / n.size() - m * m, 1.0, 0.02);
  EXPECT_ERROR(Tensor::uniform({2}, 1.0f, 1.0f), "low (1) must be less than high (1)");
}

TEST(SplitMix64, MatchesTheReferenceSequence) {
  // The first values of the reference generator started in state 1234567.
  const std::vector<uint64_t> reference = {6457827717110365317ull, 3203168211198807973ull, 9817491932198370423ull,
                                           4593380528125082431ull, 16408922859458223821ull};
  for (uint64_t i = 0; i < reference.size(); ++i) EXPECT_EQ(splitmix64(1234567, i), reference[i]) << "value " << i;
  static_assert(splitmix64_mix(0) == 0);
}

TEST(Random, TheDefaultStreamIsTheSeedsSplitMix64Sequence) {
  // Value i of the default stream is splitmix64(seed, i): initialization values stay what they were.
  manual_seed(42);
  EXPECT_EQ(random::next_u64(), 13679457532755275413ull);
  EXPECT_EQ(random::next_u64(), splitmix64(42, 1));
  manual_seed(1234567);
  EXPECT_EQ(random::next_u64(), 6457827717110365317ull);
}

// The first `count` uniform values of `device`'s stream (or the default stream) right after manual_seed(seed).
std::vector<float> first_values(uint64_t seed, std::optional<Device> device, int64_t count = 64) {
  manual_seed(seed);
  std::optional<GeneratorStreamGuard> stream;
  if (device) stream.emplace(*device);
  return Tensor::rand({count}).to_vector();
}

TEST(Random, EveryDeviceHasItsOwnStream) {
  // The guards only choose streams: naming a GPU needs none.
  const std::vector<std::optional<Device>> streams = {std::nullopt,    Device::cpu(0),  Device::cpu(1),
                                                      Device::cpu(63), Device::cuda(0), Device::cuda(1)};
  for (size_t a = 0; a < streams.size(); ++a) {
    for (size_t b = a + 1; b < streams.size(); ++b) {
      EXPECT_NE(first_values(9, streams[a]), first_values(9, streams[b])) << "streams " << a << " and " << b;
    }
  }
  // A stream depends on the seed, and the same seed gives it again.
  EXPECT_NE(first_values(9, Device::cpu(1)), first_values(10, Device::cpu(1)));
  EXPECT_EQ(first_values(9, Device::cpu(1)), first_values(9, Device::cpu(1)));
}

TEST(Random, StreamsAdvanceIndependently) {
  const std::vector<float> default_start = first_values(5, std::nullopt, 8);
  const std::vector<float> cpu1_start = first_values(5, Device::cpu(1), 8);
  manual_seed(5);
  {
    GeneratorStreamGuard cpu1(Device::cpu(1));
    EXPECT_EQ(Tensor::rand({8}).to_vector(), cpu1_start);
    {
      GeneratorStreamGuard cpu2(Device::cpu(2));  // guards nest
      Tensor::randn({100});
    }
    EXPECT_NE(Tensor::rand({8}).to_vector(), cpu1_start);  // cpu:1 moved on; cpu:2's draws did not touch it
  }
  EXPECT_EQ(Tensor::rand({8}).to_vector(), default_start);  // the default stream is still at its start
}

TEST(Random, TheThreadChoosesTheStreamNotTheTensorsDevice) {
  const std::vector<float> cpu1_start = first_values(6, Device::cpu(1), 8);
  const std::vector<float> default_start = first_values(6, std::nullopt, 8);
  manual_seed(6);
  GeneratorStreamGuard cpu1(Device::cpu(1));
  EXPECT_EQ(Tensor::rand({8}, Device::cpu(2)).to_vector(), cpu1_start);
  if (cuda_device_count() > 0) {
    manual_seed(6);
    EXPECT_EQ(Tensor::rand({8}, Device::cuda(0)).to_vector(), cpu1_start);
  }
  // A thread without a guard draws from the default stream, wherever the caller's guard points.
  manual_seed(6);
  std::vector<float> other_thread;
  std::thread([&] { other_thread = Tensor::rand({8}).to_vector(); }).join();
  EXPECT_EQ(other_thread, default_start);
}

TEST(Random, StateHoldsEveryStream) {
  manual_seed(7);
  Tensor::rand({10});
  {
    GeneratorStreamGuard cpu1(Device::cpu(1));
    Tensor::randn({3});  // two values per normal
  }
  {
    GeneratorStreamGuard cuda0(Device::cuda(0));
    Tensor::rand({5});
  }
  const GeneratorState state = generator_state();
  EXPECT_EQ(state.seed, 7u);
  EXPECT_EQ(state.counter, 10u);
  EXPECT_EQ(state.device_counters, (std::map<Device, uint64_t>{{Device::cpu(1), 6}, {Device::cuda(0), 5}}));

  auto next_values = [] {
    std::vector<std::vector<float>> values = {Tensor::rand({4}).to_vector()};
    for (Device device : {Device::cpu(1), Device::cuda(0), Device::cpu(2)}) {
      GeneratorStreamGuard stream(device);
      values.push_back(Tensor::randn({4}).to_vector());
    }
    return values;
  };
  const std::vector<std::vector<float>> next = next_values();
  manual_seed(8);
  EXPECT_EQ(generator_state(), (GeneratorState{.seed = 8, .counter = 0, .device_counters = {}}));  // all rewound
  set_generator_state(state);
  EXPECT_EQ(generator_state(), state);
  EXPECT_EQ(next_values(), next);
}

}  // namespace
}  // namespace tandem
