// Random draws inside replicas come from each device's own generator stream, so a fixed seed gives the same results
// however the replicas' threads are scheduled (Note [Generator streams]).

#include <algorithm>

#include "parallel/parallel_test_helpers.h"

namespace tandem::testing {
namespace {

constexpr int kReruns = 20;

// Linear(4, 6) -> dropout with a random delay -> Linear(6, 2), initialized from a fixed seed.
class DropoutNet : public nn::Cloneable<DropoutNet> {
 public:
  explicit DropoutNet(Device device) {
    manual_seed(31);
    fc1 = std::make_shared<nn::Linear>(4, 6, true, device);
    drop = std::make_shared<JitteredDropout>();
    fc2 = std::make_shared<nn::Linear>(6, 2, true, device);
    register_module("fc1", fc1);
    register_module("drop", drop);
    register_module("fc2", fc2);
  }
  Tensor forward(const Tensor& x) override { return fc2->forward(drop->forward(fc1->forward(x))); }

  std::shared_ptr<nn::Linear> fc1;
  std::shared_ptr<JitteredDropout> drop;
  std::shared_ptr<nn::Linear> fc2;
};

// What `module` computes on `input` right after manual_seed(seed) when its draws come from `device`'s stream: run on
// the calling thread, one replica at a time, so nothing about it depends on timing.
std::vector<float> forward_on_stream(nn::Module& module, const Tensor& input, Device device, uint64_t seed) {
  manual_seed(seed);
  GeneratorStreamGuard stream(device);
  return module.forward(input).to_vector();
}

class RandomStreams : public EveryDeviceSet {};

TEST_P(RandomStreams, ParallelApplyGivesTheSameOutputsOnEveryRerun) {
  const auto devices = this->devices();
  const auto replicas = parallel::replicate(std::make_shared<DropoutNet>(devices[0]), devices);
  std::vector<Tensor> inputs;
  for (size_t d = 0; d < devices.size(); ++d) inputs.push_back(seeded_randn({16, 4}, devices[d], 80 + d));
  std::vector<std::vector<float>> expected;
  for (size_t d = 0; d < devices.size(); ++d)
    expected.push_back(forward_on_stream(*replicas[d], inputs[d], devices[d], /*seed=*/2024));

  for (int run = 0; run < kReruns; ++run) {
    manual_seed(2024);
    const std::vector<Tensor> outputs = parallel::parallel_apply(replicas, inputs);
    for (size_t d = 0; d < devices.size(); ++d)
      ASSERT_EQ(outputs[d].to_vector(), expected[d]) << "run " << run << ", replica " << d << " on " << devices[d];
  }
}

TEST_P(RandomStreams, DataParallelGivesTheSameOutputOnEveryRerun) {
  const auto devices = this->devices();
  auto net = std::make_shared<DropoutNet>(devices[0]);
  const Tensor batch = seeded_randn({3 * static_cast<int64_t>(devices.size()), 4}, devices[0], 90);
  // Replica d gets rows [3d, 3d + 3) and draws from devices[d]'s stream.
  std::vector<float> expected;
  for (size_t d = 0; d < devices.size(); ++d) {
    const Tensor rows = batch.narrow(0, 3 * static_cast<int64_t>(d), 3).to(devices[d]);
    const std::vector<float> part = forward_on_stream(*net->clone(devices[d]), rows, devices[d], /*seed=*/77);
    expected.insert(expected.end(), part.begin(), part.end());
  }

  for (int run = 0; run < kReruns; ++run) {
    manual_seed(77);
    const Tensor output = parallel::data_parallel(net, batch, devices);
    ASSERT_EQ(output.device(), devices[0]);
    ASSERT_EQ(output.to_vector(), expected) << "run " << run;
  }
}

TEST_P(RandomStreams, EveryDeviceDrawsItsOwnMask) {
  const auto devices = this->devices();
  std::vector<std::shared_ptr<nn::Module>> replicas;
  std::vector<Tensor> inputs;
  for (const Device& device : devices) {
    replicas.push_back(std::make_shared<JitteredDropout>());
    inputs.push_back(Tensor::ones({256}, device));
  }
  manual_seed(5);
  const std::vector<Tensor> masks = parallel::parallel_apply(replicas, inputs);
  manual_seed(5);
  const std::vector<float> default_mask = JitteredDropout().forward(Tensor::ones({256})).to_vector();
  for (size_t a = 0; a < devices.size(); ++a) {
    const std::vector<float> mask = masks[a].to_vector();
    EXPECT_EQ(std::count(mask.begin(), mask.end(), 0.0f) + std::count(mask.begin(), mask.end(), 2.0f), 256);
    EXPECT_GT(std::count(mask.begin(), mask.end(), 0.0f), 64) << "a mask that drops about half";
    EXPECT_NE(mask, default_mask) << devices[a] << " drew from the default stream";
    for (size_t b = a + 1; b < devices.size(); ++b)
      EXPECT_NE(mask, masks[b].to_vector()) << devices[a] << " and " << devices[b] << " share a stream";
  }
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE_SET(RandomStreams);

}  // namespace
}  // namespace tandem::testing
