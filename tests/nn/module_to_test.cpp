// nn::Module::to moves parameters in place, as PyTorch's module.to(): every parameter tensor keeps its identity, so
// optimizers, hooks and handles made before the move keep working on the moved parameters.
#include "support/test_support.h"

namespace tandem {
namespace {

using testing::expect_close;
using testing::expect_values;

// One parameter p and a Linear child, so that nested parameters move too.
class Scaled : public nn::Cloneable<Scaled> {
 public:
  Scaled() {
    register_parameter("p", p);
    register_module("fc", fc);
  }
  Tensor forward(const Tensor& x) override { return fc->forward(x) * p; }
  Tensor p = Tensor::from_vector({1.0f, -2.0f}, {2});
  std::shared_ptr<nn::Linear> fc = std::make_shared<nn::Linear>(3, 2);
};

// Two members holding one tensor (tied weights): one parameter under two names.
class Tied : public nn::Cloneable<Tied> {
 public:
  Tied() {
    register_parameter("a", a);
    register_parameter("b", b);
  }
  Tensor forward(const Tensor& x) override { return x * a * b; }
  Tensor a = Tensor::ones({2});
  Tensor b = a;
};

// From cpu:0 to another device: cpu:1 in the CPU instance, cuda:0 in the CUDA one.
class ModuleToTest : public testing::EveryDevice {
 protected:
  Device target() const { return device() == Device::cpu(0) ? Device::cpu(1) : device(); }
};

TEST_P(ModuleToTest, AnOptimizerBuiltBeforeTheMoveUpdatesTheMovedParameters) {
  Scaled model;
  const Tensor held = model.p;  // a handle user code took before the move
  optim::SGD sgd(model.parameters(), {.lr = 0.1});
  model.to(target());
  // As torch.optim.SGD on the loss 0.5 * sum(p^2), whose gradient is p: p <- 0.9 p each step.
  for (int step = 0; step < 3; ++step) {
    sgd.zero_grad();
    (sum(model.p * model.p) * 0.5f).backward();
    sgd.step();
  }
  EXPECT_TRUE(held.is_same(model.p));
  EXPECT_EQ(held.device(), target());
  expect_values(held, {0.729, -1.458}, {2});
  EXPECT_EQ(sgd.parameters()[0].device(), target());
}

TEST_P(ModuleToTest, TrainsLikeAModelMovedBeforeItsOptimizerWasBuilt) {
  manual_seed(3);
  Scaled moved;
  std::shared_ptr<nn::Module> reference = moved.clone(target());
  optim::SGD before_move(moved.parameters(), {.lr = 0.1, .momentum = 0.9});
  moved.to(target());
  optim::SGD after_move(reference->parameters(), {.lr = 0.1, .momentum = 0.9});
  const Tensor x = Tensor::randn({4, 3}, target());
  const Tensor y = Tensor::randn({4, 2}, target());
  const std::vector<float> initial = moved.fc->weight.to_vector();
  for (int step = 0; step < 5; ++step) {
    for (auto [model, sgd] :
         {std::pair<nn::Module*, optim::SGD*>{&moved, &before_move}, {reference.get(), &after_move}}) {
      sgd->zero_grad();
      nn::mse_loss(model->forward(x), y).backward();
      sgd->step();
    }
  }
  const std::vector<Tensor> expected = reference->parameters();
  const std::vector<Tensor> actual = moved.parameters();
  for (size_t i = 0; i < actual.size(); ++i) expect_close(actual[i], expected[i]);
  EXPECT_NE(moved.fc->weight.to_vector(), initial);
}

TEST_P(ModuleToTest, KeepsHooksRequiresGradAndMovesGradients) {
  Scaled model;
  model.fc->bias.set_requires_grad(false);  // frozen
  int hook_calls = 0;
  model.p.register_post_accumulate_grad_hook([&](const Tensor&) { ++hook_calls; });
  const Tensor x = Tensor::ones({1, 3});
  sum(model(x)).backward();
  EXPECT_EQ(hook_calls, 1);
  const std::vector<float> p_grad = model.p.grad().to_vector();
  const std::vector<float> weight_grad = model.fc->weight.grad().to_vector();

  model.to(target());
  for (const auto& [name, parameter] : model.named_parameters()) {
    EXPECT_EQ(parameter.device(), target()) << name;
    EXPECT_TRUE(parameter.is_leaf()) << name;
  }
  EXPECT_TRUE(model.p.requires_grad());
  EXPECT_FALSE(model.fc->bias.requires_grad());
  ASSERT_TRUE(model.p.grad().defined());
  EXPECT_EQ(model.p.grad().device(), target());
  EXPECT_EQ(model.p.grad().to_vector(), p_grad);
  EXPECT_EQ(model.fc->weight.grad().device(), target());
  EXPECT_EQ(model.fc->weight.grad().to_vector(), weight_grad);
  EXPECT_FALSE(model.fc->bias.grad().defined());

  sum(model(x.to(target()))).backward();  // accumulates onto the moved gradient, and the hook still fires
  EXPECT_EQ(hook_calls, 2);
  EXPECT_EQ(model.p.grad().device(), target());
  expect_close(model.p.grad(), Tensor::from_vector(p_grad, {2}, target()) * 2.0f);
}

TEST_P(ModuleToTest, MovingToTheSameDeviceChangesNothing) {
  Scaled model;
  model.to(target());
  sum(model(Tensor::ones({1, 3}, target()))).backward();
  const void* data = model.p.data_ptr();
  const Tensor grad = model.p.grad();
  model.to(target());
  EXPECT_EQ(model.p.data_ptr(), data);
  EXPECT_TRUE(model.p.grad().is_same(grad));
}

TEST_P(ModuleToTest, TiedParametersStayTied) {
  Tied model;
  model.to(target());
  EXPECT_TRUE(model.a.is_same(model.b));
  EXPECT_EQ(model.b.device(), target());
  expect_values(model.b, {1, 1}, {2});
}

TEST_P(ModuleToTest, ParametersThatAreNotLeavesAreRefusedBeforeAnythingMoves) {
  nn::Linear fc(2, 2);
  // A structural copy whose bias is the result of an operation, as a replica's broadcast parameters are.
  std::shared_ptr<nn::Module> copy = fc.clone_with_parameters({fc.weight.detach(), fc.bias * 1.0f});
  EXPECT_ERROR(copy->to(target()),
               "nn::Module::to: parameter 'bias' of Linear is the result of ScaleBackward but "
               "only leaf parameters can be moved");
  for (const Tensor& parameter : copy->parameters()) EXPECT_EQ(parameter.device(), Device::cpu(0));
  EXPECT_ERROR(fc.to(Device::cuda(99)), "device cuda:99 does not exist");
  EXPECT_EQ(fc.device(), Device::cpu(0));
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(ModuleToTest);

}  // namespace
}  // namespace tandem
