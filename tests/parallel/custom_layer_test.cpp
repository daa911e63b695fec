// A layer written as a user would (its own parameters, a custom backward through autograd::Function, one extra
// line to be clonable) replicates and trains data-parallel exactly like on one device.

#include "parallel/parallel_test_helpers.h"

namespace tandem::testing {
namespace {

// y = scale * tanh(x * gain), per feature, with a hand-written backward.
struct ScaledTanhFunction : autograd::Function {
  std::vector<Tensor> forward(const std::vector<Tensor>& in) override {
    const Tensor t = tanh(in[0] * in[2]);
    save_for_backward({in[0], in[1], in[2], t});
    return {t * in[1]};
  }
  std::vector<Tensor> backward(const std::vector<Tensor>& g) override {
    const std::vector<Tensor>& saved = saved_tensors();
    const Tensor &x = saved[0], &scale = saved[1], &gain = saved[2], &t = saved[3];
    const Tensor slope = g[0] * scale * (Tensor::ones(t.shape(), t.device()) - t * t);
    return {slope * gain, sum(g[0] * t, 0), sum(slope * x, 0)};
  }
  std::string name() const override { return "ScaledTanhFunction"; }
};

class ScaledTanh : public nn::Cloneable<ScaledTanh> {  // the one extra line: Cloneable<Self>
 public:
  ScaledTanh(int64_t features, Device device)
      : scale(Tensor::full({features}, 1.5f, device)), gain(Tensor::uniform({features}, 0.5f, 1.5f, device)) {
    register_parameter("scale", scale);
    register_parameter("gain", gain);
  }
  Tensor forward(const Tensor& x) override {
    return autograd::apply(std::make_shared<ScaledTanhFunction>(), {x, scale, gain})[0];
  }
  Tensor scale;
  Tensor gain;
};

class Regressor : public nn::Cloneable<Regressor> {
 public:
  explicit Regressor(Device device) {
    manual_seed(77);
    fc1 = std::make_shared<nn::Linear>(6, 8, true, device);
    act = std::make_shared<ScaledTanh>(8, device);
    fc2 = std::make_shared<nn::Linear>(8, 1, true, device);
    register_module("fc1", fc1);
    register_module("act", act);
    register_module("fc2", fc2);
  }
  Tensor forward(const Tensor& x) override { return fc2->forward(act->forward(fc1->forward(x))); }
  std::shared_ptr<nn::Linear> fc1;
  std::shared_ptr<ScaledTanh> act;
  std::shared_ptr<nn::Linear> fc2;
};

TEST(CustomLayer, HandWrittenBackwardPassesAGradientCheck) {
  manual_seed(5);
  gradcheck(
      [](const std::vector<Tensor>& in) {
        return autograd::apply(std::make_shared<ScaledTanhFunction>(), {in[0], in[1], in[2]})[0];
      },
      {Tensor::randn({3, 4}).set_requires_grad(), Tensor::randn({4}).set_requires_grad(),
       Tensor::randn({4}).set_requires_grad()});
}

class CustomLayerDataParallel : public EveryDeviceSet {};

TEST_P(CustomLayerDataParallel, ReplicatesWithItsParametersAndTrainsLikeOneDevice) {
  const auto devices = this->devices();
  auto model = std::make_shared<Regressor>(devices[0]);
  auto reference = std::make_shared<Regressor>(devices[0]);
  const auto replicas = parallel::replicate(model, devices);
  EXPECT_EQ(replicas.back()->act->gain.device(), devices.back());
  expect_close(replicas.back()->act->gain, model->act->gain, 0.0, 0.0);
  EXPECT_EQ(model->named_parameters()[2].first, "act.scale");

  const optim::SGDOptions options{.lr = 0.1, .momentum = 0.9};
  optim::SGD sgd(model->parameters(), options);
  optim::SGD reference_sgd(reference->parameters(), options);
  for (int step = 0; step < 5; ++step) {
    const Tensor x = seeded_randn({11, 6}, devices[0], 900 + step);
    const Tensor y = seeded_randn({11, 1}, devices[0], 950 + step);
    sgd.zero_grad();
    nn::mse_loss(parallel::data_parallel(model, x, devices), y).backward();
    sgd.step();
    reference_sgd.zero_grad();
    nn::mse_loss(reference->forward(x), y).backward();
    reference_sgd.step();
  }
  expect_parameters_close(*model, *reference);
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE_SET(CustomLayerDataParallel);

}  // namespace
}  // namespace tandem::testing
