// clone(device) deep copies, clone_with_parameters / set_parameters, and the errors for modules that cannot clone.
#include "support/test_support.h"

namespace tandem {
namespace {

using testing::expect_close;

// A user layer: one extra line (deriving from Cloneable<Self>) makes it clonable.
class Residual : public nn::Cloneable<Residual> {
 public:
  explicit Residual(int64_t features) : inner(std::make_shared<nn::Linear>(features, features)), label("res") {
    register_module("inner", inner);
    register_parameter("gain", gain);
  }
  Tensor forward(const Tensor& x) override { return x + inner->forward(x) * gain; }

  std::shared_ptr<nn::Linear> inner;
  Tensor gain = Tensor::full({1}, 0.5f);
  std::string label;  // not registered: copied as it is
};

class Net : public nn::Cloneable<Net> {
 public:
  Net() {
    register_module("body", body);
    register_module("head", head);
  }
  Tensor forward(const Tensor& x) override { return head->forward(body->forward(x)); }

  std::shared_ptr<nn::Module> body = std::make_shared<Residual>(3);  // held through the base type
  std::shared_ptr<nn::Sequential> head = std::make_shared<nn::Sequential>(
      nn::Sequential{std::make_shared<nn::ReLU>(), std::make_shared<nn::Linear>(3, 1)});
};

void expect_deep_copy(const nn::Module& original, const nn::Module& copy, Device device) {
  auto a = original.named_parameters();
  auto b = copy.named_parameters();
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].first, b[i].first);
    EXPECT_EQ(b[i].second.device(), device);
    EXPECT_FALSE(b[i].second.shares_storage_with(a[i].second)) << b[i].first;
    EXPECT_TRUE(b[i].second.requires_grad());
    EXPECT_TRUE(b[i].second.is_leaf());
    expect_close(b[i].second, a[i].second, 0, 0);
  }
}

class CloneTest : public testing::EveryDevice {};

TEST_P(CloneTest, CloneDeepCopiesOntoADevice) {
  manual_seed(5);
  auto net = std::make_shared<Net>();
  for (std::optional<Device> target : {std::optional<Device>(), std::optional<Device>(device())}) {
    std::shared_ptr<nn::Module> copy = net->clone(target);
    ASSERT_NE(std::dynamic_pointer_cast<Net>(copy), nullptr);
    expect_deep_copy(*net, *copy, target.value_or(Device::cpu()));
    // The copy's members are its own (new objects), found through the member slots.
    auto typed = std::static_pointer_cast<Net>(copy);
    EXPECT_NE(typed->body, net->body);
    EXPECT_NE(typed->head, net->head);
    EXPECT_NE((*typed->head)[1], (*net->head)[1]);
    auto residual = std::static_pointer_cast<Residual>(typed->body);
    auto copied = copy->named_parameters();  // own parameters come before the children's, as in PyTorch
    EXPECT_EQ(copied[0].first, "body.gain");
    EXPECT_TRUE(residual->gain.is_same(copied[0].second));
    EXPECT_EQ(copied[1].first, "body.inner.weight");
    EXPECT_TRUE(residual->inner->weight.is_same(copied[1].second));
    EXPECT_EQ(residual->label, "res");

    Tensor x = Tensor::randn({4, 3});
    expect_close(copy->forward(x.to(target.value_or(Device::cpu()))), net->forward(x), 1e-5, 1e-6);
  }
}

TEST_P(CloneTest, CloneIsIndependentOfTheOriginal) {
  nn::Linear fc(2, 2, true, device());
  auto copy = std::static_pointer_cast<nn::Linear>(fc.clone());
  {
    NoGradGuard no_grad;
    copy->weight.fill_(3.0f);
  }
  EXPECT_FALSE(allclose(fc.weight, copy->weight));
  EXPECT_EQ(copy->in_features(), 2);
  EXPECT_FALSE(copy->weight.grad().defined());

  fc.bias.set_requires_grad(false);  // frozen parameters stay frozen in copies
  auto frozen = std::static_pointer_cast<nn::Linear>(fc.clone(Device::cpu(1)));
  EXPECT_TRUE(frozen->weight.requires_grad());
  EXPECT_FALSE(frozen->bias.requires_grad());
  EXPECT_TRUE(frozen->bias.is_leaf());
}

TEST_P(CloneTest, CloneWithParametersUsesTheGivenTensorsAndPassesGradientsBack) {
  manual_seed(9);
  Net net;
  std::vector<Tensor> master = net.parameters();
  // Stand-ins for broadcast outputs: differentiable copies on the device, with edges back to the master.
  std::vector<Tensor> replicated;
  for (const Tensor& p : master) replicated.push_back(p.to(device()) * 1.0f);
  std::shared_ptr<nn::Module> replica = net.clone_with_parameters(replicated);
  std::vector<Tensor> used = replica->parameters();
  ASSERT_EQ(used.size(), replicated.size());
  for (size_t i = 0; i < used.size(); ++i) EXPECT_TRUE(used[i].is_same(replicated[i]));
  for (size_t i = 0; i < used.size(); ++i) EXPECT_TRUE(master[i].is_same(net.parameters()[i]));  // untouched

  Tensor x = Tensor::randn({6, 3});
  nn::mse_loss(replica->forward(x.to(device())), Tensor::zeros({6, 1}, device())).backward();
  nn::mse_loss(net.forward(x), Tensor::zeros({6, 1})).backward();  // the master's own gradient, added on top
  for (const Tensor& p : master) {
    ASSERT_TRUE(p.grad().defined());
    EXPECT_EQ(p.grad().device(), Device::cpu());
  }
  // Both backward passes computed the same gradient, so each master gradient is twice the single-pass one.
  Net single;
  single.set_parameters([&] {
    std::vector<Tensor> fresh;
    for (const Tensor& p : master) fresh.push_back(p.detach().clone().set_requires_grad(true));
    return fresh;
  }());
  nn::mse_loss(single.forward(x), Tensor::zeros({6, 1})).backward();
  std::vector<Tensor> reference = single.parameters();
  for (size_t i = 0; i < master.size(); ++i) expect_close(master[i].grad(), reference[i].grad() * 2.0f, 1e-5, 1e-6);
}

TEST_P(CloneTest, CloneWithParametersChecksCountAndShapes) {
  nn::Linear fc(3, 2, true, device());
  EXPECT_ERROR(fc.clone_with_parameters({fc.weight}),
               "nn::Module::set_parameters: Linear has 2 parameters but 1 tensors were given");
  EXPECT_ERROR(fc.clone_with_parameters({fc.weight, Tensor::zeros({3}, device())}),
               "nn::Module::set_parameters: 'bias' has shape [2] but the tensor given for it has shape [3]");
  EXPECT_ERROR(fc.set_parameters({fc.weight, Tensor()}), "the tensor for 'bias' is undefined");
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(CloneTest);

class NotCloneable : public nn::Module {
 public:
  NotCloneable() { register_module("fc", fc); }
  Tensor forward(const Tensor& x) override { return fc->forward(x); }
  std::shared_ptr<nn::Linear> fc = std::make_shared<nn::Linear>(2, 2);
};

class Wrapper : public nn::Cloneable<Wrapper> {
 public:
  Wrapper() { register_module("inner", inner); }
  Tensor forward(const Tensor& x) override { return inner->forward(x); }
  std::shared_ptr<NotCloneable> inner = std::make_shared<NotCloneable>();
};

// Derives from a Cloneable layer without opting in itself: cloning would slice it to a Linear.
class ScaledLinear : public nn::Linear {
 public:
  ScaledLinear() : nn::Linear(2, 2) {}
  Tensor forward(const Tensor& x) override { return nn::Linear::forward(x) * 2.0f; }
};

TEST(CloneErrors, ModulesThatDidNotOptInThrow) {
  NotCloneable plain;
  EXPECT_ERROR(plain.clone(), "nn::Module::clone: NotCloneable does not derive from nn::Cloneable<NotCloneable>");
  EXPECT_ERROR(plain.clone_with_parameters(plain.parameters()),
               "nn::Module::clone_with_parameters: NotCloneable does not derive from nn::Cloneable");
  EXPECT_ERROR(Wrapper().clone(), "nn::Module::clone: NotCloneable does not derive from nn::Cloneable");
  EXPECT_ERROR(ScaledLinear().clone(),
               "nn::Module::clone: ScaledLinear inherits clone() from nn::Cloneable<Linear>, which would copy only "
               "that base; derive ScaledLinear from nn::Cloneable<ScaledLinear> itself");
}

}  // namespace
}  // namespace tandem
