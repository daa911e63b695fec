// parallel::ReplicatedModule::zero_grad marks the gradient views stale instead of zeroing the buffers (Note [Zeroing
// by marking] in parallel/src/replicated.cpp): the next step writes every gradient over whatever the buffers held,
// parameters that get no gradient and replicas without input count as zeros, and reading gives zeros.

#include <limits>

#include "parallel/parallel_test_helpers.h"

namespace tandem::testing {
namespace {

class ZeroingByMarking : public EveryDeviceSet {};

// TwoLayerNet's layers plus a parameter that forward never uses.
class NetWithUnused : public nn::Cloneable<NetWithUnused> {
 public:
  explicit NetWithUnused(Device device) : unused(Tensor::ones({3}, device)) {
    manual_seed(77);
    fc1 = std::make_shared<nn::Linear>(4, 6, true, device);
    fc2 = std::make_shared<nn::Linear>(6, 2, true, device);
    register_module("fc1", fc1);
    register_module("fc2", fc2);
    register_parameter("unused", unused);
  }
  Tensor forward(const Tensor& x) override { return fc2->forward(relu(fc1->forward(x))); }

  std::shared_ptr<nn::Linear> fc1;
  std::shared_ptr<nn::Linear> fc2;
  Tensor unused;
};

// Every buffer full of NaN, as garbage a missed write would leave behind.
void poison(const parallel::ReplicatedModule& model) {
  NoGradGuard no_grad;
  for (size_t d = 0; d < model.size(); ++d)
    Tensor(model.gradient_buffer(d)).fill_(std::numeric_limits<float>::quiet_NaN());
}

// The gradients of sum over the inputs of sum(net(input)) * (i + 1), on one device.
std::vector<Tensor> reference_gradients(const std::vector<Tensor>& inputs, Device device) {
  NetWithUnused net(device);
  for (size_t i = 0; i < inputs.size(); ++i)
    (sum(net.forward(inputs[i].to(device))) * static_cast<float>(i + 1)).backward();
  std::vector<Tensor> grads = gradients_of(net);
  grads.front() = Tensor::zeros({3}, device);  // unused (own parameters come first): no gradient, held as zeros
  return grads;
}

TEST_P(ZeroingByMarking, AStepWritesOverWhatTheBuffersHeld) {
  const auto devices = this->devices();
  for (const bool fewer_inputs : {false, true}) {
    SCOPED_TRACE(fewer_inputs ? "one replica without input" : "every replica with input");
    parallel::ReplicatedModule model(std::make_shared<NetWithUnused>(devices[0]), devices, {.bucket_size = 64});
    poison(model);
    model.zero_grad();
    const size_t used = fewer_inputs ? devices.size() - 1 : devices.size();
    std::vector<Tensor> inputs;
    for (size_t d = 0; d < used; ++d) inputs.push_back(seeded_randn({5, 4}, devices[d], 40 + d));
    model.forward_backward(
        inputs, [](size_t replica, const Tensor& output) { return sum(output) * static_cast<float>(replica + 1); });
    const std::vector<Tensor> expected = reference_gradients(inputs, devices[0]);
    for (size_t d = 0; d < model.size(); ++d) {
      SCOPED_TRACE("replica " + std::to_string(d));
      expect_gradients_close(*model.replicas()[d], expected);
    }
  }
}

TEST_P(ZeroingByMarking, ABackwardOfTheCallerAndReadsAfterZeroGradSeeZeros) {
  const auto devices = this->devices();
  parallel::ReplicatedModule model(std::make_shared<NetWithUnused>(devices[0]), devices);
  poison(model);
  model.zero_grad();
  for (const Tensor& parameter : model.module()->parameters()) EXPECT_TRUE(parameter.grad_is_stale());
  const Tensor buffer = model.gradient_buffer(0);
  expect_values(buffer, std::vector<double>(static_cast<size_t>(buffer.numel()), 0.0), buffer.shape());

  poison(model);
  model.zero_grad();
  std::vector<Tensor> inputs;
  for (size_t d = 0; d < devices.size(); ++d) inputs.push_back(seeded_randn({3, 4}, devices[d], 60 + d));
  const std::vector<Tensor> outputs = model.forward_replicas(inputs);
  model.prepare_for_backward(outputs.size());
  std::vector<Tensor> losses;
  for (size_t d = 0; d < outputs.size(); ++d) losses.push_back(sum(outputs[d]) * static_cast<float>(d + 1));
  autograd::backward(losses);
  model.reduce_gradients();
  const std::vector<Tensor> expected = reference_gradients(inputs, devices[0]);
  for (size_t d = 0; d < model.size(); ++d) expect_gradients_close(*model.replicas()[d], expected);
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE_SET(ZeroingByMarking);

}  // namespace
}  // namespace tandem::testing
