// ReplicatedModule keeps its replicas across steps; they run in the master's training modes, set on the whole
// master or on one of its submodules, as PyTorch's DataParallel replicas (copied with their modes each forward) do.
#include "parallel/parallel_test_helpers.h"

namespace tandem::testing {
namespace {

// Multiplies by its weight (1), and by 2 more in training mode: the output tells the mode of the replica that ran.
class TrainingDoubles : public nn::Cloneable<TrainingDoubles> {
 public:
  TrainingDoubles() { register_parameter("w", w); }
  Tensor forward(const Tensor& x) override { return x * w * (is_training() ? 2.0f : 1.0f); }
  Tensor w = Tensor::ones({1});
};

// first then second: x * 4 with both training, x * 2 with one of them in eval mode, x with both.
class TwoStages : public nn::Cloneable<TwoStages> {
 public:
  TwoStages() {
    register_module("first", first);
    register_module("second", second);
  }
  Tensor forward(const Tensor& x) override { return second->forward(first->forward(x)); }
  std::shared_ptr<TrainingDoubles> first = std::make_shared<TrainingDoubles>();
  std::shared_ptr<TrainingDoubles> second = std::make_shared<TrainingDoubles>();
};

class ReplicatedModes : public EveryDeviceSet {
 protected:
  std::vector<Tensor> ones_on_every_device() const {
    std::vector<Tensor> inputs;
    for (const Device& device : devices()) inputs.push_back(Tensor::ones({2, 1}, device));
    return inputs;
  }
  // Expects every replica's forward of ones to be `factor`, and its flags to be the master's.
  void expect_every_replica(parallel::ReplicatedModule& model, float factor) const {
    const std::vector<Tensor> outputs = model.forward_replicas(ones_on_every_device());
    ASSERT_EQ(outputs.size(), devices().size());
    for (size_t d = 0; d < outputs.size(); ++d) {
      SCOPED_TRACE("replica " + std::to_string(d));
      expect_values(outputs[d], {factor, factor}, {2, 1});
      EXPECT_EQ(model.replicas()[d]->training_modes(), model.module()->training_modes());
    }
  }
};

TEST_P(ReplicatedModes, ReplicasFollowTheMastersTrainAndEval) {
  auto net = std::make_shared<TwoStages>();
  net->to(devices()[0]);
  parallel::ReplicatedModule model(net, devices());
  expect_every_replica(model, 4.0f);
  net->eval();
  expect_every_replica(model, 1.0f);
  net->train();
  expect_every_replica(model, 4.0f);
  net->second->eval();  // one submodule on its own
  expect_every_replica(model, 2.0f);
  expect_every_replica(model, 2.0f);  // unchanged since the last step
}

TEST_P(ReplicatedModes, ForwardBackwardFollowsTheMastersModes) {
  auto net = std::make_shared<TwoStages>();
  net->to(devices()[0]);
  parallel::ReplicatedModule model(net, devices());
  auto losses_of = [&] {
    const std::vector<Tensor> losses =
        model.forward_backward(ones_on_every_device(), [](size_t, const Tensor& output) { return sum(output); });
    std::vector<float> values;
    for (const Tensor& loss : losses) values.push_back(loss.item());
    return values;
  };
  // sum over two rows of 1 * factor.
  EXPECT_EQ(losses_of(), std::vector<float>(devices().size(), 8.0f));
  net->eval();
  EXPECT_EQ(losses_of(), std::vector<float>(devices().size(), 2.0f));
  net->first->train();
  EXPECT_EQ(losses_of(), std::vector<float>(devices().size(), 4.0f));
}

TEST_P(ReplicatedModes, DataParallelReplicasCarryTheMastersModes) {
  auto net = std::make_shared<TwoStages>();
  net->to(devices()[0]);
  net->second->eval();
  const auto rows = static_cast<int64_t>(2 * devices().size());
  const Tensor output = parallel::data_parallel(net, Tensor::ones({rows, 1}, devices()[0]), devices());
  expect_values(output, std::vector<double>(static_cast<size_t>(rows), 2.0), {rows, 1});
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE_SET(ReplicatedModes);

}  // namespace
}  // namespace tandem::testing
