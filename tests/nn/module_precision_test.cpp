// nn::Module::set_precision and the layers that follow it, and nn::Sequential running a Linear followed by a ReLU as
// one op (Linear::forward_relu).
#include "support/test_support.h"

namespace tandem {
namespace {

class ModulePrecisionTest : public testing::EveryDevice {};

nn::Sequential mlp(Device device) {
  manual_seed(21);
  return nn::Sequential(nn::Linear(12, 16, true, device), nn::ReLU(), nn::Linear(16, 8, true, device), nn::Tanh(),
                        nn::Linear(8, 3, true, device));
}

TEST(ModulePrecision, SetPrecisionReachesEveryDescendantAndClones) {
  nn::Sequential net = mlp(Device::cpu());
  EXPECT_EQ(net.precision(), std::nullopt);
  net.set_precision(Precision::BFloat16);
  EXPECT_EQ(net.precision(), Precision::BFloat16);
  for (const auto& child : net.children()) EXPECT_EQ(child->precision(), Precision::BFloat16) << child->name();
  EXPECT_EQ(net.clone()->children()[4]->precision(), Precision::BFloat16);
  net.set_precision(std::nullopt);
  for (const auto& child : net.children()) EXPECT_EQ(child->precision(), std::nullopt) << child->name();
}

TEST_P(ModulePrecisionTest, LinearRunsInItsPrecision) {
  manual_seed(2);
  nn::Linear layer(20, 7, true, device());
  const Tensor x = Tensor::randn({9, 20}, device());
  for (const Precision precision : {Precision::Float32, Precision::TF32, Precision::BFloat16}) {
    layer.set_precision(precision);
    EXPECT_EQ(layer.forward(x).to_vector(), linear(x, layer.weight, layer.bias, precision).to_vector())
        << precision_name(precision);
  }
  layer.set_precision(Precision::BFloat16);
  EXPECT_NE(layer.forward(x).to_vector(), linear(x, layer.weight, layer.bias, Precision::Float32).to_vector());
}

TEST_P(ModulePrecisionTest, SequentialFusesALinearFollowedByAReLU) {
  nn::Sequential net = mlp(device());
  const auto first = std::dynamic_pointer_cast<nn::Linear>(net[0]);
  const auto second = std::dynamic_pointer_cast<nn::Linear>(net[2]);
  const auto third = std::dynamic_pointer_cast<nn::Linear>(net[4]);
  manual_seed(3);
  const Tensor x = Tensor::randn({10, 12}, device());
  const Tensor y = net.forward(x);
  const Tensor hidden = linear_relu(x, first->weight, first->bias);
  EXPECT_EQ(hidden.grad_fn()->name(), "LinearReluBackward");
  const Tensor expected = linear(tanh(linear(relu(linear(x, first->weight, first->bias)), second->weight,
                                             second->bias)),
                                 third->weight, third->bias);
  testing::expect_close(y, expected, 1e-5, 1e-6);
  // The graph: the last Linear's input comes from Tanh, whose input is a plain Linear fed by the fused op.
  EXPECT_EQ(y.grad_fn()->name(), "LinearBackward");
  sum(y).backward();
  for (const Tensor& parameter : net.parameters()) EXPECT_TRUE(parameter.grad().defined());
}

TEST_P(ModulePrecisionTest, ADerivedLinearIsNotFused) {
  struct Shifted : nn::Linear {
    using nn::Linear::Linear;
    Tensor forward(const Tensor& input) override { return nn::Linear::forward(input) - 100.0f; }
  };
  manual_seed(4);
  nn::Sequential net(std::make_shared<Shifted>(4, 3, true, device()), std::make_shared<nn::ReLU>());
  const Tensor y = net.forward(Tensor::randn({2, 4}, device()));
  testing::expect_values(y, std::vector<double>(6, 0.0), {2, 3});  // the shift ran, then the ReLU
}

TANDEM_INSTANTIATE_ON_EVERY_DEVICE(ModulePrecisionTest);

}  // namespace
}  // namespace tandem
