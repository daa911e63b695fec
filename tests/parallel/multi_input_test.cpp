// Modules with several inputs and outputs through replicate + parallel_apply, data_parallel and DataParallel: the
// same outputs, and the same gradients on the master, as one device.

#include "parallel/parallel_test_helpers.h"

namespace tandem::testing {
namespace {

// mix(a, b) = a W + b * scale, with a second output tanh(a W) - b when built with `pair`; W [4, 3], scale [3],
// built on `device` from a fixed seed, so that two mixes built with the same arguments are equal.
class AffineMix : public nn::Cloneable<AffineMix> {
 public:
  AffineMix(Device device, bool pair) : pair_(pair) {
    manual_seed(77);
    weight = Tensor::randn({4, 3}, device);
    scale = Tensor::uniform({3}, 0.5f, 1.5f, device);
    register_parameter("weight", weight);
    register_parameter("scale", scale);
  }
  std::vector<Tensor> forward_all(const std::vector<Tensor>& inputs) override {
    check_input_count(inputs, 2);
    const Tensor product = matmul(inputs[0], weight);
    if (!pair_) return {product + inputs[1] * scale};
    return {product + inputs[1] * scale, tanh(product) - inputs[1]};
  }
  Tensor weight;
  Tensor scale;

 private:
  bool pair_;
};

std::shared_ptr<AffineMix> make_mix(Device device, bool pair = false) {
  return std::make_shared<AffineMix>(device, pair);
}

// One input, two outputs: x and 2x.
class Twice : public nn::Cloneable<Twice> {
 public:
  std::vector<Tensor> forward_all(const std::vector<Tensor>& inputs) override {
    check_input_count(inputs, 1);
    return {inputs[0], inputs[0] * 2.0f};
  }
};

// One output per row of its input, so replicas given different numbers of rows return different numbers of outputs.
class OnePerRow : public nn::Cloneable<OnePerRow> {
 public:
  std::vector<Tensor> forward_all(const std::vector<Tensor>& inputs) override {
    return std::vector<Tensor>(static_cast<size_t>(inputs.at(0).size(0)), inputs[0]);
  }
};

// A scalar loss of both outputs of a pair mix.
Tensor loss_of(const std::vector<Tensor>& outputs, const Tensor& target) {
  return nn::mse_loss(outputs[0], target) + mean(outputs[1] * outputs[1]);
}

class MultiInputParallelTest : public EveryDeviceSet {};

TEST_P(MultiInputParallelTest, ReplicateAndParallelApplyGiveOneDeviceOutputsAndGradients) {
  const auto devices = this->devices();
  auto mix = make_mix(devices[0], true);
  auto reference = make_mix(devices[0], true);
  std::vector<std::vector<Tensor>> inputs;
  for (size_t d = 0; d < devices.size(); ++d) {
    const int64_t rows = static_cast<int64_t>(d) + 2;
    inputs.push_back({seeded_randn({rows, 4}, devices[d], 10 + d), seeded_randn({rows, 3}, devices[d], 20 + d)});
  }
  const std::vector<std::shared_ptr<AffineMix>> replicas = parallel::replicate(mix, devices);
  const std::vector<std::vector<Tensor>> outputs = parallel::parallel_apply(replicas, inputs);
  ASSERT_EQ(outputs.size(), devices.size());

  std::vector<Tensor> losses;
  Tensor reference_loss;
  for (size_t d = 0; d < devices.size(); ++d) {
    SCOPED_TRACE("replica " + std::to_string(d));
    const std::vector<Tensor> expected =
        reference->forward_all({inputs[d][0].to(devices[0]), inputs[d][1].to(devices[0])});
    ASSERT_EQ(outputs[d].size(), 2u);
    for (size_t k = 0; k < 2; ++k) {
      EXPECT_EQ(outputs[d][k].device(), devices[d]);
      expect_close(outputs[d][k], expected[k]);
    }
    const Tensor target = Tensor::ones(outputs[d][0].shape(), devices[d]);
    losses.push_back(loss_of(outputs[d], target));
    const Tensor reference_term = loss_of(expected, target.to(devices[0]));
    reference_loss = reference_loss.defined() ? reference_loss + reference_term : reference_term;
  }
  autograd::backward(losses);
  reference_loss.backward();
  expect_gradients_close(*mix, gradients_of(*reference));
}

TEST_P(MultiInputParallelTest, ParallelApplyMovesEveryOutputToItsDevice) {
  const auto devices = this->devices();
  const std::vector<std::shared_ptr<nn::Module>> replicas(devices.size(), std::make_shared<Twice>());
  std::vector<std::vector<Tensor>> inputs;
  for (size_t d = 0; d < devices.size(); ++d) inputs.push_back({Tensor::full({2}, static_cast<float>(d), devices[d])});
  const std::vector<Device> destinations(devices.size(), devices.back());
  const auto outputs = parallel::parallel_apply(replicas, inputs, destinations);
  for (size_t d = 0; d < devices.size(); ++d) {
    ASSERT_EQ(outputs[d].size(), 2u);
    for (const Tensor& output : outputs[d]) EXPECT_EQ(output.device(), devices.back());
    expect_values(outputs[d][1], {2.0 * static_cast<double>(d), 2.0 * static_cast<double>(d)}, {2});
  }
}

// data_parallel(mix, {a, b}) against the whole batch on devices[0]: both outputs, the master's gradients and the
// inputs' gradients.
void expect_data_parallel_same_as_one_device(const std::vector<Device>& devices, int64_t rows,
                                             std::optional<Device> output_device = std::nullopt) {
  SCOPED_TRACE("batch of " + std::to_string(rows) + " rows");
  auto mix = make_mix(devices[0], true);
  auto reference = make_mix(devices[0], true);
  const Tensor a = seeded_randn({rows, 4}, devices[0], 30 + rows).set_requires_grad();
  const Tensor b = seeded_randn({rows, 3}, devices[0], 40 + rows).set_requires_grad();
  const Tensor reference_a = a.detach().clone().set_requires_grad();
  const Tensor reference_b = b.detach().clone().set_requires_grad();
  const Tensor target = seeded_randn({rows, 3}, devices[0], 50 + rows);

  const std::vector<Tensor> outputs = parallel::data_parallel(mix, {a, b}, devices, output_device);
  const std::vector<Tensor> expected = reference->forward_all({reference_a, reference_b});
  ASSERT_EQ(outputs.size(), 2u);
  for (size_t k = 0; k < 2; ++k) {
    EXPECT_EQ(outputs[k].device(), output_device.value_or(devices[0]));
    expect_close(outputs[k], expected[k]);
  }
  loss_of(outputs, target.to(outputs[0].device())).backward();
  loss_of(expected, target).backward();
  expect_gradients_close(*mix, gradients_of(*reference));
  expect_close(a.grad(), reference_a.grad());
  expect_close(b.grad(), reference_b.grad());
}

TEST_P(MultiInputParallelTest, DataParallelGivesOneDeviceOutputsAndGradients) {
  for (int64_t rows : {12, 7, 5, 2, 1}) expect_data_parallel_same_as_one_device(devices(), rows);
}

TEST_P(MultiInputParallelTest, DataParallelToAnotherOutputDeviceAndOnOneDevice) {
  const auto devices = this->devices();
  expect_data_parallel_same_as_one_device(devices, 5, devices.back());
  expect_data_parallel_same_as_one_device({devices[0]}, 5, devices.back());
}

TEST_P(MultiInputParallelTest, DataParallelModuleCallsWithTwoInputs) {
  const auto devices = this->devices();
  auto mix = make_mix(devices[0]);
  auto reference = make_mix(devices[0]);
  parallel::DataParallel wrapped(mix, devices);
  const Tensor a = seeded_randn({7, 4}, devices[0], 60);
  const Tensor b = seeded_randn({7, 3}, devices[0], 61);
  const Tensor output = wrapped(a, b);
  const Tensor expected = (*reference)(a, b);
  expect_close(output, expected);
  sum(output * output).backward();
  sum(expected * expected).backward();
  expect_gradients_close(*mix, gradients_of(*reference));
}

TEST_P(MultiInputParallelTest, OneInputFormsRejectSeveralOutputs) {
  const auto devices = this->devices();
  const Tensor x = seeded_randn({5, 2}, devices[0], 70);
  auto twice = std::make_shared<Twice>();
  const std::vector<Tensor> both = parallel::data_parallel(twice, std::vector<Tensor>{x}, devices);
  ASSERT_EQ(both.size(), 2u);
  expect_close(both[0], x);
  expect_close(both[1], x * 2.0f);
  EXPECT_ERROR(parallel::data_parallel(twice, x, devices),
               "parallel::data_parallel: Twice returned 2 outputs but one was expected");
  EXPECT_ERROR(parallel::parallel_apply(std::vector<std::shared_ptr<nn::Module>>{twice}, {x}),
               "parallel::parallel_apply: Twice returned 2 outputs but one was expected");
  EXPECT_ERROR(parallel::DataParallel(twice, devices)(x),
               "parallel::data_parallel: Twice returned 2 outputs but one was expected");
}

TEST_P(MultiInputParallelTest, DocumentedErrors) {
  const auto devices = this->devices();
  const size_t n = devices.size();
  auto mix = make_mix(devices[0]);
  const Tensor a = Tensor::zeros({5, 4}, devices[0]);
  const Tensor b = Tensor::zeros({4, 3}, devices[0]);
  EXPECT_ERROR(parallel::data_parallel(mix, {a, b}, devices),
               "parallel::data_parallel: input 1 has size 4 along dim 0 but input 0 has size 5; every input is "
               "split the same way");
  EXPECT_ERROR(parallel::data_parallel(mix, std::vector<Tensor>{}, devices), "parallel::data_parallel: got no inputs");
  EXPECT_ERROR(parallel::data_parallel(mix, {a, Tensor()}, devices), "parallel::data_parallel: input 1 is undefined");
  EXPECT_ERROR(parallel::data_parallel(mix, a, devices), "nn::Module::forward_all: AffineMix takes 2 inputs but got 1");
  EXPECT_ERROR(
      parallel::data_parallel(make_net(devices[0]), {a, a}, devices),
      "in replica 0 on device " + devices[0].str() + ": nn::Module::forward_all: TwoLayerNet takes 1 input but got 2");
  // 2n - 1 rows: the last replica gets one row, the others two.
  EXPECT_ERROR(
      parallel::data_parallel(std::make_shared<OnePerRow>(),
                              std::vector<Tensor>{Tensor::zeros({2 * static_cast<int64_t>(n) - 1, 1}, devices[0])},
                              devices),
      "parallel::data_parallel: replica " + std::to_string(n - 1) + " returned 1 outputs but replica 0 returned 2");

  const std::vector<std::shared_ptr<nn::Module>> replicas{mix};
  EXPECT_ERROR(parallel::parallel_apply(replicas, std::vector<std::vector<Tensor>>{{}}),
               "parallel::parallel_apply: inputs of replica 0 are empty");
  EXPECT_ERROR(parallel::parallel_apply(replicas, std::vector<std::vector<Tensor>>{{a, Tensor()}}),
               "parallel::parallel_apply: input 1 of replica 0 is undefined");
  EXPECT_ERROR(parallel::parallel_apply(replicas, std::vector<std::vector<Tensor>>{{a, b}, {a, b}}),
               "parallel::parallel_apply: got 1 replicas but 2 inputs");
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE_SET(MultiInputParallelTest);

}  // namespace
}  // namespace tandem::testing
