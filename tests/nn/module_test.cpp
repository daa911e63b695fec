// Module registry: names and order of parameters, children, zero_grad(), registration errors, printing.
#include <sstream>

#include "support/test_support.h"

namespace tandem {
namespace {

using testing::expect_values;

// A two-level user module: own parameter first, then submodules (one of them a Sequential).
class Block : public nn::Cloneable<Block> {
 public:
  Block() {
    register_parameter("scale", scale);
    register_module("fc1", fc1);
    register_module("head", head);
  }
  Tensor forward(const Tensor& x) override { return head->forward(fc1->forward(x)) * scale; }

  Tensor scale = Tensor::ones({1});
  std::shared_ptr<nn::Linear> fc1 = std::make_shared<nn::Linear>(3, 4);
  std::shared_ptr<nn::Sequential> head = std::make_shared<nn::Sequential>(
      nn::Sequential{std::make_shared<nn::Tanh>(), std::make_shared<nn::Linear>(4, 2, false)});
};

std::vector<std::string> names_of(const std::vector<std::pair<std::string, Tensor>>& named) {
  std::vector<std::string> names;
  for (const auto& entry : named) names.push_back(entry.first);
  return names;
}

TEST(ModuleTest, NamedParametersOfNestedModulesUseTorchNamesAndOrder) {
  Block block;
  EXPECT_EQ(names_of(block.named_parameters()),
            (std::vector<std::string>{"scale", "fc1.weight", "fc1.bias", "head.1.weight"}));
  std::vector<Tensor> parameters = block.parameters();
  ASSERT_EQ(parameters.size(), 4u);
  EXPECT_TRUE(parameters[0].is_same(block.scale));
  EXPECT_TRUE(parameters[1].is_same(block.fc1->weight));
  EXPECT_TRUE(parameters[2].is_same(block.fc1->bias));
  for (const Tensor& parameter : parameters) EXPECT_TRUE(parameter.requires_grad());
  EXPECT_EQ(block.num_parameters(), 1 + 12 + 4 + 8);

  auto children = block.named_children();
  ASSERT_EQ(children.size(), 2u);
  EXPECT_EQ(children[0].first, "fc1");
  EXPECT_EQ(children[0].second, block.fc1);
  EXPECT_EQ(children[1].first, "head");
  EXPECT_EQ(block.children()[1], block.head);
}

TEST(ModuleTest, SequentialNamesChildrenByIndex) {
  nn::Sequential net{std::make_shared<nn::Linear>(2, 3), std::make_shared<nn::ReLU>(),
                     std::make_shared<nn::Linear>(3, 1)};
  net.push_back(std::make_shared<nn::Tanh>());
  EXPECT_EQ(net.size(), 4u);
  EXPECT_EQ(names_of(net.named_parameters()),
            (std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"}));
  EXPECT_EQ(net[1]->name(), "ReLU");
  EXPECT_EQ(std::dynamic_pointer_cast<nn::Linear>(net[2])->in_features(), 3);
  EXPECT_ERROR(net[4], "nn::Sequential: index 4 is out of range for 4 modules");
  EXPECT_ERROR(net.push_back(nullptr), "nn::Sequential::push_back: module 4 is null");
}

TEST(ModuleTest, SequentialForwardChainsChildrenAndEmptyIsIdentity) {
  auto fc = std::make_shared<nn::Linear>(2, 2);
  {
    NoGradGuard no_grad;
    fc->weight.copy_(Tensor::from_vector({1, -1, 2, 0}, {2, 2}));
    fc->bias.copy_(Tensor::from_vector({0.5f, -3}, {2}));
  }
  nn::Sequential net{fc, std::make_shared<nn::ReLU>()};
  // x W^T + b = [1 - 2 + 0.5, 2 - 3] = [-0.5, -1] for x = [1, 2]; relu -> [0, 0]; x = [3, 1]: [2.5, 3]
  expect_values(net(Tensor::from_vector({1, 2, 3, 1}, {2, 2})), {0, 0, 2.5, 3}, {2, 2});
  nn::Sequential empty;
  EXPECT_TRUE(empty.empty());
  expect_values(empty(Tensor::from_vector({4, 5}, {2})), {4, 5}, {2});
}

class NoRegistration : public nn::Module {
 public:
  Tensor forward(const Tensor& x) override { return x; }
  void add_parameter(const std::string& name, Tensor& t) { register_parameter(name, t); }
  void add_module(const std::string& name, std::shared_ptr<nn::Linear>& m) { register_module(name, m); }
  Tensor a = Tensor::ones({2});
  Tensor b = Tensor::ones({2});
  std::shared_ptr<nn::Linear> fc;
};

TEST(ModuleTest, RegistrationErrors) {
  NoRegistration module;
  module.add_parameter("a", module.a);
  EXPECT_ERROR(module.add_parameter("a", module.b), "nn::Module::register_parameter: NoRegistration already has a "
                                                    "parameter named 'a'");
  EXPECT_ERROR(module.add_parameter("", module.b), "nn::Module::register_parameter: empty name in NoRegistration");
  EXPECT_ERROR(module.add_parameter("x.y", module.b), "name 'x.y' in NoRegistration contains '.'");
  Tensor undefined;
  EXPECT_ERROR(module.add_parameter("u", undefined), "parameter 'u' of NoRegistration is undefined");
  Tensor leaf = Tensor::ones({2}).set_requires_grad(true);
  Tensor non_leaf = leaf * 2.0f;
  EXPECT_ERROR(module.add_parameter("n", non_leaf), "parameters must be leaf tensors");
  EXPECT_ERROR(module.add_module("fc", module.fc), "nn::Module::register_module: submodule 'fc' of NoRegistration "
                                                   "is null");
  module.fc = std::make_shared<nn::Linear>(1, 1);
  EXPECT_ERROR(module.add_module("a", module.fc), "NoRegistration already has a parameter named 'a'");
}

TEST(ModuleTest, DeviceOfFirstParameterAndErrorWithoutParameters) {
  EXPECT_EQ(nn::Linear(2, 2, true, Device::cpu(1)).device(), Device::cpu(1));
  EXPECT_ERROR(nn::ReLU().device(), "nn::Module::device: ReLU has no parameters");
}

TEST(ModuleTest, ZeroGradSetsToNoneOrZeroesInPlace) {
  nn::Linear fc(2, 1);
  auto run = [&] { nn::mse_loss(fc(Tensor::ones({3, 2})), Tensor::zeros({3, 1})).backward(); };
  run();
  Tensor grad = fc.weight.grad();
  ASSERT_TRUE(grad.defined());
  fc.zero_grad(false);
  EXPECT_TRUE(fc.weight.grad().is_same(grad));
  expect_values(fc.weight.grad(), {0, 0}, {1, 2});
  fc.zero_grad();
  EXPECT_FALSE(fc.weight.grad().defined());
  EXPECT_FALSE(fc.bias.grad().defined());
}

TEST(ModuleTest, TrainAndEvalAreRecursive) {
  Block block;
  EXPECT_TRUE(block.is_training());
  block.eval();
  EXPECT_FALSE(block.is_training());
  EXPECT_FALSE(block.head->is_training());
  EXPECT_FALSE((*block.head)[0]->is_training());
  block.train();
  EXPECT_TRUE((*block.head)[1]->is_training());
}

TEST(ModuleTest, PrintsTheModuleTree) {
  std::ostringstream os;
  os << Block();
  EXPECT_EQ(os.str(),
            "Block(\n"
            "  (fc1): Linear(in_features=3, out_features=4, bias=true)\n"
            "  (head): Sequential(\n"
            "    (0): Tanh()\n"
            "    (1): Linear(in_features=4, out_features=2, bias=false)\n"
            "  )\n"
            ")");
}

}  // namespace
}  // namespace tandem
